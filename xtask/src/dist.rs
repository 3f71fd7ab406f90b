//! `cargo xtask dist`: the release tarball that installs without a Rust toolchain.
//!
//! `target/dist/cg-trace-VERSION-ARCH-linux.tar.gz` holds `bin/cg-trace` (the eBPF object
//! embedded, as always; debug info stripped; checked to need nothing but glibc and GCC's
//! libgcc_s), the completions and man pages the binary generates (`share/...`, laid out as
//! under a prefix), README.md and the docs/ pages it links to (with the report's JSON
//! Schema), `install.sh` and `SHA256SUMS` of those files;
//! next to it, `….tar.gz.sha256` for `sha256sum -c` and `install.sh --checksum`.
//!
//! `--profile debug` packs `target/debug/cg-trace` instead of a release build, and
//! `--no-build` packs what is there without running cargo: the end-to-end test
//! (tests/tests/dist.rs) uses both, as a release build takes minutes. `--out DIR` puts the
//! tarball elsewhere.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::{cargo, root, status};

/// The documentation the tarball carries, relative to the workspace root: README.md and
/// every page of docs/ (Markdown, and the report's JSON Schema), where README's links
/// expect them.
fn documentation() -> Result<Vec<String>> {
    let mut pages = Vec::new();
    let docs = root().join("docs");
    for entry in fs::read_dir(&docs).with_context(|| format!("reading {}", docs.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_file() && (name.ends_with(".md") || name.ends_with(".json")) {
            pages.push(format!("docs/{name}"));
        }
    }
    pages.sort();
    pages.insert(0, "README.md".to_owned());
    Ok(pages)
}

/// Where the man pages go under a prefix: one a subcommand besides cg-trace.1, named by
/// `cg-trace man-page --list`.
const MAN_DIR: &str = "share/man/man1";

/// The completions the binary generates (`cg-trace ARGS` on stdout), where they go under a
/// prefix.
const COMPLETIONS: [(&[&str], &str); 3] = [
    (
        &["completions", "bash"],
        "share/bash-completion/completions/cg-trace",
    ),
    (
        &["completions", "zsh"],
        "share/zsh/site-functions/_cg-trace",
    ),
    (
        &["completions", "fish"],
        "share/fish/vendor_completions.d/cg-trace.fish",
    ),
];

/// The install script placed in the tarball.
const INSTALL_SH: &str = include_str!("install.sh");

/// The shared libraries the binary may need: glibc's own, and GCC's unwinder (libgcc_s, on
/// every glibc system: glibc itself loads it for thread cancellation).
const ALLOWED_NEEDED: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

struct Options {
    profile: String,
    build: bool,
    out: PathBuf,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        profile: "release".into(),
        build: true,
        out: root().join("target/dist"),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--profile" => match args.next().map(String::as_str) {
                Some(p @ ("release" | "debug")) => options.profile = p.into(),
                other => bail!("--profile release|debug, not {other:?}"),
            },
            "--no-build" => options.build = false,
            "--out" => {
                let dir = args.next().context("--out DIR")?;
                options.out = PathBuf::from(dir);
            }
            other => bail!(
                "dist: unknown argument {other:?} (dist [--profile release|debug] [--no-build] \
                 [--out DIR])"
            ),
        }
    }
    Ok(options)
}

/// Whether `dist` needs the toolchain set up (it builds).
pub fn builds(args: &[String]) -> bool {
    !args.iter().any(|a| a == "--no-build")
}

pub fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    let target_dir = root().join("target").join(&options.profile);
    if options.build {
        let mut cmd = cargo();
        cmd.args(["build", "-p", "cg-agent", "--bin", "cg-trace"]);
        if options.profile == "release" {
            cmd.arg("--release");
        }
        status(&mut cmd)?;
    }
    let binary = target_dir.join("cg-trace");
    if !binary.is_file() {
        bail!(
            "{} is missing: build it (cargo build{})",
            binary.display(),
            if options.profile == "release" {
                " --release"
            } else {
                ""
            }
        );
    }
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("cg-trace-{version}-{}-linux", std::env::consts::ARCH);
    fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    let stage = options.out.join(&name);
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    }
    let file = |relative: &str| -> Result<PathBuf> {
        let path = stage.join(relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        Ok(path)
    };

    let staged_binary = file("bin/cg-trace")?;
    fs::copy(&binary, &staged_binary).with_context(|| format!("copying {}", binary.display()))?;
    // Debug info is for developers (a debug build's is most of its size); the symbols stay.
    status(
        Command::new("strip")
            .arg("--strip-debug")
            .arg(&staged_binary),
    )?;
    fs::set_permissions(&staged_binary, fs::Permissions::from_mode(0o755))?;
    check_needed(&staged_binary)?;

    write_generated(&staged_binary, &stage)?;
    for relative in documentation()? {
        fs::copy(root().join(&relative), file(&relative)?)
            .with_context(|| format!("copying {relative}"))?;
    }
    for license in ["LICENSE", "LICENSE-MIT", "LICENSE-APACHE", "COPYING"] {
        let path = root().join(license);
        if path.is_file() {
            fs::copy(&path, file(license)?)?;
        }
    }
    let install = file("install.sh")?;
    fs::write(&install, INSTALL_SH)?;
    fs::set_permissions(&install, fs::Permissions::from_mode(0o755))?;

    // SHA256SUMS of every file but itself, for install.sh.
    let mut files = Vec::new();
    list_files(&stage, Path::new(""), &mut files)?;
    files.sort();
    let sums = Command::new("sha256sum")
        .args(&files)
        .current_dir(&stage)
        .output()
        .context("sha256sum")?;
    if !sums.status.success() {
        bail!(
            "sha256sum failed: {}",
            String::from_utf8_lossy(&sums.stderr)
        );
    }
    fs::write(stage.join("SHA256SUMS"), &sums.stdout)?;

    // Reproducible: files by name, owned by root, the time of the commit built.
    let tarball = format!("{name}.tar.gz");
    let mtime = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or_else(|| "0".into());
    status(Command::new("tar").current_dir(&options.out).args([
        "--sort=name",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        &format!("--mtime=@{mtime}"),
        "--use-compress-program=gzip -n",
        "-cf",
        &tarball,
        &name,
    ]))?;
    let digest = Command::new("sha256sum")
        .arg(&tarball)
        .current_dir(&options.out)
        .output()
        .context("sha256sum")?;
    if !digest.status.success() {
        bail!(
            "sha256sum failed: {}",
            String::from_utf8_lossy(&digest.stderr)
        );
    }
    fs::write(
        options.out.join(format!("{tarball}.sha256")),
        &digest.stdout,
    )?;
    fs::remove_dir_all(&stage)?;
    let size_mb = fs::metadata(options.out.join(&tarball))?.len() as f64 / 1e6;
    eprintln!(
        "xtask: {} ({size_mb:.1} MB) and {tarball}.sha256; install with: tar xzf {tarball} && \
         sudo sh {name}/install.sh",
        options.out.join(&tarball).display()
    );
    Ok(())
}

/// Has `binary` write its man pages and completions under `prefix` (`share/...`).
pub fn write_generated(binary: &Path, prefix: &Path) -> Result<()> {
    let list = generated_by(binary, &["man-page", "--list"])?;
    let mut files: Vec<(Vec<String>, String)> = Vec::new();
    for page in String::from_utf8_lossy(&list).lines() {
        // A name we write a file under: cg-trace.1 or cg-trace-WORD.1, nothing else.
        let subcommand = page
            .strip_prefix("cg-trace-")
            .and_then(|p| p.strip_suffix(".1"));
        let args = match subcommand {
            None if page == "cg-trace.1" => vec!["man-page".to_string()],
            Some(word)
                if !word.is_empty()
                    && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') =>
            {
                vec!["man-page".to_string(), word.to_string()]
            }
            _ => bail!("cg-trace man-page --list named {page:?}, not a page name"),
        };
        files.push((args, format!("{MAN_DIR}/{page}")));
    }
    if files.len() < 2 {
        bail!(
            "cg-trace man-page --list named {} page(s): expected one per subcommand",
            files.len()
        );
    }
    for (args, relative) in COMPLETIONS {
        files.push((
            args.iter().map(|a| a.to_string()).collect(),
            relative.to_string(),
        ));
    }
    for (args, relative) in files {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let path = prefix.join(relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        fs::write(&path, generated_by(binary, &args)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// What `binary ARGS` prints on stdout (it must succeed and print something).
fn generated_by(binary: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let output = Command::new(binary)
        .args(args)
        .output()
        .with_context(|| format!("running cg-trace {}", args.join(" ")))?;
    if !output.status.success() || output.stdout.is_empty() {
        bail!(
            "cg-trace {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(output.stdout)
}

/// The binary must need no shared library beyond glibc's and libgcc_s (`readelf -d`).
fn check_needed(binary: &Path) -> Result<()> {
    let output = Command::new("readelf")
        .arg("-d")
        .arg(binary)
        .output()
        .context("readelf (binutils)")?;
    if !output.status.success() {
        bail!("readelf -d {} failed", binary.display());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let needed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    let extra: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|n| !ALLOWED_NEEDED.contains(n))
        .collect();
    if !extra.is_empty() {
        bail!(
            "{} needs {} beyond glibc: link it statically (as xz2's `static` feature does for \
             liblzma) or add it to the install's requirements",
            binary.display(),
            extra.join(", ")
        );
    }
    eprintln!("xtask: the binary needs {}", needed.join(", "));
    Ok(())
}

/// Files under `dir`, as paths relative to the staging root.
fn list_files(dir: &Path, relative: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = relative.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            list_files(&entry.path(), &path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}
