//! `cargo xtask`: the project's own commands.
//!
//! - `setup`: installs what building and testing need on a fresh machine, in two steps.
//!   What building needs ([`BUILD_PACKAGES`], `setup --build` alone): LLVM 22 dev files
//!   (apt), gcc, nightly `rust-src`, bpf-linker built against LLVM 22. What the tests,
//!   benchmarks and fuzz targets add ([`TEST_PACKAGES`]): tmux, sudo, python3.11,
//!   prometheus, chromium, man-db, g++, cargo-fuzz (libFuzzer), kubernetes-validate (PyPI, in
//!   a venv under `target/`), ...
//! - `build`: the build's setup, then builds the workspace (`--release` for an optimised
//!   binary).
//! - `run`: the build's setup, a release build of `cg-trace` alone, then runs it with the
//!   arguments after `--`.
//! - `test`: the whole setup, rustfmt check, clippy (user space, then the eBPF crate with its own
//!   target), unit tests, every fuzz target for a few seconds, then the end-to-end tests
//!   (root, real eBPF) one at a time.
//! - `fuzz [TARGET] [SECONDS]`: the whole setup, then runs the fuzz targets in `fuzz/` (all, or one),
//!   each for SECONDS (default 60), growing the corpus in `fuzz/corpus/`.
//! - `bench`: the whole setup, release build, then the overhead benchmarks, the cost of polling the energy
//!   sources, the live view's cost and function-level profiling's cost (probes, sampling,
//!   symbolization, stack loss and the sampler's kernel time); prints figures (`--overhead`,
//!   `--iterator` (iterator accounting's idle cost, beside switch accounting's, and one read with 10,000 threads),
//!   `--sources`, `--tui`, `--functions`: only those; `--functions --sampler`: only the
//!   sampler's loss and kernel time; `--functions --globs`: only the cost of matching `--func`
//!   globs; `--functions --unwind`: only unwinding without frame pointers against frame
//!   pointers, kernel and agent time per sample; `--functions --against-perf`: only stacks
//!   and self shares against `perf record --call-graph dwarf` on Debian's stripped xz and
//!   gzip, not in the full run: it needs perf and libc6-dbg); `--diff`: only the time `cg-trace diff` takes on two 20-run reports; `--report`:
//!   only the time and page size of `cg-trace report` on a one-hour run and of `diff --format
//!   html`; `--repeat`: only what each run of a `--repeat` set costs; `--proc`: only the
//!   hand-written `/proc` readers against the procfs crate; `--serve`: a simulated week of
//!   process churn through serve mode's accounting and a scrape's time; `--memory`: only the peak
//!   memory of `report` and `diff` on a 1.04 M-process report and of `--all` and `serve`
//!   through a fork storm of 20,000 processes (none of these in the full run: they measure no
//!   overhead).
//! - `dist [--profile release|debug] [--no-build] [--out DIR]`: the release tarball
//!   (`target/dist/cg-trace-VERSION-ARCH-linux.tar.gz` and its `.sha256`) that installs
//!   without a toolchain: binary, completions, man page, README and docs, `install.sh` (see `dist`).
//! - `deb`: the Debian package through cargo-deb (installed by hand: see `deb`).
//! - `gpu-check`: on a machine with an NVIDIA GPU, cg-trace's GPU energy next to nvidia-smi's.

mod bench;
mod bench_diff;
mod bench_functions;
mod bench_memory;
mod bench_perf;
mod bench_repeat;
mod bench_report;
mod bench_serve;
mod bench_signals;
mod bench_sources;
mod bench_unwind;
mod bench_view;
mod deb;
mod dist;
mod fuzz;
mod gpu_check;
mod rounds;

use std::{
    env,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask <setup [--build] | build [--release] | run -- CG-TRACE-ARGS... | test | fuzz [TARGET] [SECONDS] | bench [--quick] [--overhead | --iterator | --sources | --proc | --tui | --functions [--sampler | --globs | --unwind | --against-perf | --naming] | --diff | --report | --repeat | --serve | --signals | --memory] | dist [--profile release|debug] [--no-build] [--out DIR] | deb | gpu-check [--binary PATH] [-- CMD ARGS...]>";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => match args.get(1).map(String::as_str) {
            None => setup(Needs::Tests),
            Some("--build") => setup(Needs::Build),
            Some(other) => Err(anyhow::anyhow!(
                "setup takes --build or nothing, not {other:?}"
            )),
        },
        Some("build") => {
            setup(Needs::Build).and_then(|()| build(args.iter().any(|a| a == "--release")))
        }
        Some("run") => setup(Needs::Build).and_then(|()| run(&args[1..])),
        Some("test") => setup(Needs::Tests).and_then(|()| test()),
        Some("fuzz") => setup(Needs::Tests).and_then(|()| fuzz::run(&args[1..])),
        Some("bench") => setup(Needs::Tests).and_then(|()| bench::run(&args[1..])),
        Some("dist") if dist::builds(&args[1..]) => {
            setup(Needs::Build).and_then(|()| dist::run(&args[1..]))
        }
        Some("dist") => dist::run(&args[1..]),
        Some("deb") => setup(Needs::Build).and_then(|()| deb::run(&args[1..])),
        Some("gpu-check") => match gpu_check::given_binary(&args[1..]) {
            Ok(Some(_)) => gpu_check::run(&args[1..]),
            _ => setup(Needs::Build).and_then(|()| gpu_check::run(&args[1..])),
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (xtask lives in `<root>/xtask`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Runs a command, failing with its name when it fails.
fn status(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    eprintln!("xtask: $ {shown}");
    let status = cmd.status().with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Prefixes `sudo` when we are not root.
fn privileged(program: &str) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut cmd = Command::new("sudo");
        cmd.arg(program);
        cmd
    }
}

/// How much `setup` installs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// What building the workspace needs: `run`, `build`, `dist`, `deb`.
    Build,
    /// That, and what the tests, benchmarks and fuzz targets need: `test`, `fuzz`, `bench`.
    Tests,
}

/// What building needs (apt).
const BUILD_PACKAGES: &[&str] = &[
    // bpf-linker links against LLVM 22 (TOOLCHAIN.md).
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    // The C compiler: rustc's linker driver, liblzma built from source (xz2's `static`), and
    // the C parts of the tests crate's workloads (tests/build.rs, with binutils' objcopy).
    "gcc",
    "libc6-dev",
    // tests/build.rs compresses a MiniDebugInfo section (a workspace build builds it), and
    // shrinks a program's DWARF with dwz (a supplementary debug file, as distributions ship).
    "xz-utils",
    "dwz",
];

/// What the tests, benchmarks and fuzz targets add (apt).
const TEST_PACKAGES: &[&str] = &[
    "tmux",
    "util-linux",
    // The Python end-to-end tests (CPython 3.11).
    "python3.11",
    // The exporter's end-to-end test scrapes `cg-trace serve` with a real Prometheus server.
    "prometheus",
    // Workloads of the sampler benchmark (`bench --functions --sampler`; xz is a build need).
    "gzip",
    "make",
    // The security tests run cg-trace through the real sudo (tests/tests/security.rs).
    "sudo",
    // libfuzzer-sys builds libFuzzer (C++) for the fuzz targets.
    "g++",
    // The man page test renders `cg-trace man-page` with `man -l` (tests/tests/cli.rs).
    "man-db",
    // The HTML report tests open the page in headless Chromium (tests/tests/html.rs).
    "chromium",
    // A venv for kubernetes-validate, which checks deploy/'s manifests (tests/tests/deploy.rs).
    "python3-venv",
];

/// kubernetes-validate from PyPI, pinned: the Kubernetes API's schemas, carried offline.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";

/// Where it is installed, in a venv of its own (Debian's Python refuses pip outside one);
/// tests/tests/deploy.rs runs it from there.
fn kubernetes_validate_venv() -> PathBuf {
    root().join("target/kubernetes-validate")
}

/// Installs [`KUBERNETES_VALIDATE`] in its venv, unless that version is there already.
fn install_kubernetes_validate() -> Result<()> {
    let venv = kubernetes_validate_venv();
    let version = KUBERNETES_VALIDATE
        .rsplit_once("==")
        .map_or("", |(_, version)| version);
    let installed = Command::new(venv.join("bin/kubernetes-validate"))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == version);
    if installed {
        return Ok(());
    }
    eprintln!(
        "xtask: installing {KUBERNETES_VALIDATE} in {}",
        venv.display()
    );
    // Debian's python3 (python3-venv), not whichever a shell's PATH finds first.
    status(
        Command::new("/usr/bin/python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
    )?;
    status(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        KUBERNETES_VALIDATE,
    ]))
}

/// The apt packages `needs` asks for.
fn apt_packages(needs: Needs) -> Vec<&'static str> {
    match needs {
        Needs::Build => BUILD_PACKAGES.to_vec(),
        Needs::Tests => [BUILD_PACKAGES, TEST_PACKAGES].concat(),
    }
}

/// Installs what `needs` asks for and is missing; checks only, when nothing is.
fn setup(needs: Needs) -> Result<()> {
    let missing: Vec<&str> = apt_packages(needs)
        .into_iter()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .collect();
    if !missing.is_empty() {
        eprintln!("xtask: installing {}", missing.join(" "));
        status(privileged("apt-get").arg("update"))?;
        status(
            privileged("apt-get")
                .args(["install", "-y", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
    }

    // Nightly with rust-src builds the eBPF crate (-Z build-std=core). Never update an
    // installed nightly here: only add what is missing.
    if !succeeds(Command::new("rustup").args(["run", "nightly", "rustc", "--version"])) {
        status(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
            "--component",
            "rust-src",
        ]))?;
    }
    let rust_src = Command::new("rustup")
        .args(["component", "list", "--installed", "--toolchain", "nightly"])
        .output()
        .context("rustup component list")?;
    if !String::from_utf8_lossy(&rust_src.stdout).contains("rust-src") {
        status(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }

    if !succeeds(Command::new("bpf-linker").arg("--version")) {
        eprintln!("xtask: building bpf-linker against LLVM 22 (about a minute)");
        status(
            Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args([
                    "install",
                    "bpf-linker",
                    "--locked",
                    "--no-default-features",
                    "--features",
                    "llvm-22",
                ])
                .env("LLVM_PREFIX", "/usr/lib/llvm-22"),
        )?;
    }

    if needs == Needs::Build {
        return Ok(());
    }
    install_kubernetes_validate()?;
    // cargo-fuzz runs the fuzz targets (fuzz/) with the nightly toolchain.
    if !succeeds(Command::new("rustup").args(["run", "nightly", "cargo", "fuzz", "--version"])) {
        eprintln!("xtask: building cargo-fuzz (about a minute)");
        status(
            Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into())).args([
                "install",
                "cargo-fuzz",
                "--locked",
            ]),
        )?;
    }
    Ok(())
}

fn build(release: bool) -> Result<()> {
    let mut cmd = cargo();
    cmd.arg("build");
    if release {
        cmd.arg("--release");
    }
    status(&mut cmd)
}

/// A `cg-trace` binary (`binary`, e.g. the release one), as root: directly when xtask is root, else through `sudo -E`
/// (-E keeps the caller's environment; sudo records SUDO_UID, so the command runs as the
/// caller, not as root).
fn release_cg_trace(binary: &Path) -> Command {
    if is_root() {
        Command::new(binary)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg("-E").arg(binary);
        sudo
    }
}

fn run(args: &[String]) -> Result<()> {
    // cg-trace alone: not the tests crate and its C workloads.
    status(cargo().args(["build", "--release", "-p", "cg-agent", "--bin", "cg-trace"]))?;
    let args = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => args,
    };
    let mut cmd = release_cg_trace(&root().join("target/release/cg-trace"));
    cmd.args(args);
    let status = cmd.status().context("running cg-trace")?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => std::process::exit(code),
        None => bail!("cg-trace was killed ({status})"),
    }
}

fn test() -> Result<()> {
    status(cargo().args(["fmt", "--all", "--", "--check"]))?;
    // Clippy as aya's template does it: user space without the eBPF crate, then the eBPF
    // crate for its own target with the nightly toolchain.
    status(cargo().args([
        "clippy",
        "--workspace",
        "--exclude",
        "cg-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    status(
        Command::new("rustup")
            .current_dir(root().join("cg-ebpf"))
            .args([
                "run",
                "nightly",
                "cargo",
                "clippy",
                "--release",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--",
                "-D",
                "warnings",
            ])
            .env("CARGO_TARGET_DIR", root().join("target/ebpf-clippy")),
    )?;
    // Builds every binary the end-to-end tests run (cg-trace and the workloads).
    status(cargo().arg("build"))?;
    status(cargo().args([
        "test",
        "--workspace",
        "--exclude",
        "cg-ebpf",
        "--exclude",
        "cg-tests",
    ]))?;
    // The fuzz crate is a workspace of its own: formatted, linted, then every target runs
    // for a few seconds from its seeds and past crashes.
    fuzz::check()?;
    fuzz::smoke()?;
    if !is_root() {
        bail!(
            "the end-to-end tests load eBPF programs and need root: run `sudo -E cargo xtask test`"
        );
    }
    status(cargo().args(["test", "-p", "cg-tests", "--", "--test-threads=1"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn building_installs_none_of_what_only_the_tests_need() {
        let build = apt_packages(Needs::Build);
        for test_only in [
            "chromium",
            "prometheus",
            "tmux",
            "g++",
            "man-db",
            "python3.11",
            "python3-venv",
            "sudo",
        ] {
            assert!(
                !build.contains(&test_only),
                "the build installs {test_only}"
            );
        }
        for needed in [
            "llvm-22-dev",
            "libpolly-22-dev",
            "libzstd-dev",
            "gcc",
            "libc6-dev",
        ] {
            assert!(build.contains(&needed), "the build lacks {needed}");
        }
        // The tests get everything (CI's `cargo xtask test` starts from a fresh machine).
        let tests = apt_packages(Needs::Tests);
        for package in build.iter().chain(TEST_PACKAGES) {
            assert!(tests.contains(package), "the tests lack {package}");
        }
        assert!(tests.contains(&"chromium") && tests.contains(&"man-db"));
        // Each package is said once.
        let mut sorted = tests.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), tests.len(), "{tests:?}");
    }
}
