//! Builds the eBPF object (cg-ebpf) with the nightly toolchain and bpf-linker, through
//! aya-build, into OUT_DIR where `probes` includes it. `cargo xtask setup` installs what this
//! needs on a fresh machine. Without the `ebpf` feature (the fuzz targets) it builds nothing.
//!
//! It also gives `cg-trace --version` (and serve's `cg_trace_build_info`) its build facts, as environment variables of the
//! crate: `CG_TRACE_GIT_COMMIT` (the commit built, "unknown" outside a git checkout, e.g. a
//! source tarball) and `CG_TRACE_EBPF_INFO` (the eBPF object's size, SHA-256, and the
//! bpf-linker and nightly rustc that built it).

use std::{path::Path, process::Command};

/// The first line a command prints, or None when it cannot run or fails.
fn first_line(program: &str, args: &[&str], dir: &Path) -> Option<String> {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let line = text.lines().next()?.trim();
    // A line for a version string: printable and short.
    (!line.is_empty() && line.len() <= 200 && !line.chars().any(char::is_control))
        .then(|| line.to_string())
}

/// The commit being built, and cargo told to rerun us when it changes (HEAD moves, or the
/// branch it names gets a new commit). "unknown" outside a git checkout.
fn git_commit(manifest_dir: &Path) -> String {
    let git = |args: &[&str]| first_line("git", args, manifest_dir);
    // An abbreviated object name is hexadecimal; anything else (an odd git) is not a commit.
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"])
        .filter(|c| c.len() <= 40 && c.chars().all(|ch| ch.is_ascii_hexdigit()))
    else {
        return "unknown".into();
    };
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo::rerun-if-changed={git_dir}/HEAD");
    }
    if let (Some(common), Some(branch)) = (
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) {
        let reference = Path::new(&common).join(&branch);
        if reference.exists() {
            println!("cargo::rerun-if-changed={}", reference.display());
        } else {
            println!("cargo::rerun-if-changed={common}/packed-refs");
        }
    }
    commit
}

fn build_info() -> String {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let commit = git_commit(Path::new(&manifest_dir));
    println!("cargo::rustc-env=CG_TRACE_GIT_COMMIT={commit}");
    commit
}

#[cfg(feature = "ebpf")]
fn main() -> anyhow::Result<()> {
    use anyhow::{Context as _, anyhow};

    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());

    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "cg-ebpf")
        .ok_or_else(|| anyhow!("cg-ebpf package not found in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    build_info();
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context(
        "building the eBPF programs failed; run `cargo xtask setup` to install nightly rust-src, \
         LLVM 22 and bpf-linker",
    )?;
    let out_dir = std::env::var("OUT_DIR").context("OUT_DIR")?;
    let object = std::fs::read(Path::new(&out_dir).join("cg-ebpf")).context("the eBPF object")?;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&object);
    let sha256: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let here = Path::new(&manifest_dir);
    let linker = first_line("bpf-linker", &["--version"], here)
        .unwrap_or_else(|| "bpf-linker unknown".into());
    let rustc = first_line("rustup", &["run", "nightly", "rustc", "--version"], here)
        .unwrap_or_else(|| "nightly rustc unknown".into());
    println!(
        "cargo::rustc-env=CG_TRACE_EBPF_INFO={} bytes, sha256 {sha256}, built by {linker}, {rustc}",
        object.len()
    );
    Ok(())
}

#[cfg(not(feature = "ebpf"))]
fn main() -> anyhow::Result<()> {
    println!("cargo::rerun-if-changed=build.rs");
    build_info();
    println!("cargo::rustc-env=CG_TRACE_EBPF_INFO=none (built without the `ebpf` feature)");
    Ok(())
}
