//! End-to-end test of the install without a toolchain: `cargo xtask dist` packs the binary
//! (here the debug one, `--profile debug --no-build`: a release build takes minutes; the
//! packing is the same), the tarball is unpacked in a clean directory, `install.sh` places it
//! under a temporary prefix with a PATH that has no cargo or rustc, and the installed
//! cg-trace lists the sources and traces a command. Root (the wrap run loads eBPF).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use cg_tests::{assert_adds_up, bin, require_root};
use serde_json::Value;

/// A PATH with the system's tools only (no ~/.cargo/bin).
const CLEAN_PATH: &str = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `program` with nothing of our environment but the clean PATH.
fn clean(program: &Path, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", CLEAN_PATH)
        .env("HOME", dir)
        .output()
        .unwrap_or_else(|err| panic!("running {}: {err}", program.display()))
}

/// Builds the tarball into `out`; returns its path.
fn dist(out: &Path) -> PathBuf {
    let output = Command::new(bin("xtask"))
        .args(["dist", "--profile", "debug", "--no-build", "--out"])
        .arg(out)
        .output()
        .expect("running xtask");
    assert!(
        output.status.success(),
        "xtask dist: {}",
        text(&output.stderr)
    );
    let name = format!(
        "cg-trace-{}-{}-linux.tar.gz",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    );
    let tarball = out.join(&name);
    assert!(tarball.is_file(), "no {name}: {}", text(&output.stderr));
    tarball
}

#[test]
fn the_tarball_installs_and_runs_without_a_toolchain() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let tarball = dist(&out);
    let checksum = PathBuf::from(format!("{}.sha256", tarball.display()));
    let verified = Command::new("sha256sum")
        .arg("--check")
        .arg(checksum.file_name().unwrap())
        .current_dir(&out)
        .output()
        .unwrap();
    assert!(verified.status.success(), "{}", text(&verified.stdout));

    // No toolchain on the PATH the install and the runs get.
    let which = clean(
        Path::new("/bin/sh"),
        &["-c", "command -v cargo || command -v rustc"],
        work.path(),
    );
    assert!(
        !which.status.success(),
        "cargo or rustc on {CLEAN_PATH}: {}",
        text(&which.stdout)
    );

    let unpacked = work.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let untar = clean(
        Path::new("/usr/bin/tar"),
        &["-xzf", tarball.to_str().unwrap()],
        &unpacked,
    );
    assert!(untar.status.success(), "{}", text(&untar.stderr));
    let top = unpacked.join(
        tarball
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".tar.gz"),
    );
    for file in [
        "bin/cg-trace",
        "install.sh",
        "README.md",
        "SHA256SUMS",
        "share/man/man1/cg-trace.1",
        "share/man/man1/cg-trace-diff.1",
    ] {
        assert!(top.join(file).is_file(), "the tarball lacks {file}");
    }
    // Every docs/ page the README links to travels with it, where the link expects it.
    let readme = std::fs::read_to_string(top.join("README.md")).unwrap();
    let linked: Vec<&str> = readme
        .split("](docs/")
        .skip(1)
        .map(|rest| rest.split([')', '#']).next().unwrap())
        .collect();
    assert!(
        linked.contains(&"modes-and-options.md") && linked.contains(&"report.md"),
        "README.md links to no docs/ pages: {linked:?}"
    );
    for page in linked {
        assert!(
            top.join("docs").join(page).is_file(),
            "the tarball lacks docs/{page}, which README.md links to"
        );
    }

    let prefix = work.path().join("prefix");
    let install = clean(
        Path::new("/bin/sh"),
        &[
            top.join("install.sh").to_str().unwrap(),
            "--prefix",
            prefix.to_str().unwrap(),
            "--checksum",
            checksum.to_str().unwrap(),
        ],
        work.path(),
    );
    let said = text(&install.stdout);
    assert!(
        install.status.success(),
        "install.sh: {said}{}",
        text(&install.stderr)
    );
    assert!(said.contains("checksum verified"), "{said}");
    let installed = prefix.join("bin/cg-trace");
    // The setcap line is offered, not run.
    assert!(
        said.contains(&format!(
            "sudo setcap cap_bpf,cap_perfmon+ep {}",
            installed.display()
        )),
        "{said}"
    );
    let caps = Command::new("getcap").arg(&installed).output();
    if let Ok(caps) = caps {
        assert_eq!(text(&caps.stdout).trim(), "", "install.sh set capabilities");
    }
    for file in [
        "share/man/man1/cg-trace.1",
        "share/man/man1/cg-trace-serve.1",
        "share/bash-completion/completions/cg-trace",
        "share/zsh/site-functions/_cg-trace",
        "share/fish/vendor_completions.d/cg-trace.fish",
    ] {
        assert!(prefix.join(file).is_file(), "not installed: {file}");
    }
    let bash_n = Command::new("bash")
        .arg("-n")
        .arg(prefix.join("share/bash-completion/completions/cg-trace"))
        .status()
        .unwrap();
    assert!(bash_n.success());

    // Needs nothing beyond glibc (and GCC's libgcc_s).
    let dynamic = Command::new("readelf")
        .arg("-d")
        .arg(&installed)
        .output()
        .unwrap();
    for line in text(&dynamic.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
    {
        assert!(
            ["libc.so.6", "libm.so.6", "libgcc_s.so.1", "ld-linux"]
                .iter()
                .any(|lib| line.contains(lib)),
            "the installed binary needs more than glibc: {line}"
        );
    }

    let sources = clean(&installed, &["sources"], work.path());
    assert!(sources.status.success(), "{}", text(&sources.stderr));
    assert!(
        text(&sources.stdout).contains("model"),
        "{}",
        text(&sources.stdout)
    );

    let run = clean(&installed, &["-o", "r.json", "--", "true"], work.path());
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let report: Value = cg_tests::read_report(&work.path().join("r.json"));
    assert_eq!(report["meta"]["command"], serde_json::json!(["true"]));
    assert_eq!(report["meta"]["command_exit_code"], 0);
    assert_adds_up(&report);
}

#[test]
fn install_refuses_a_tarball_that_does_not_match_its_checksum() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let tarball = dist(&out);
    let unpacked = work.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let untar = clean(
        Path::new("/usr/bin/tar"),
        &["-xzf", tarball.to_str().unwrap()],
        &unpacked,
    );
    assert!(untar.status.success());
    let top = unpacked.join(
        tarball
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".tar.gz"),
    );
    let install = |checksum: &Path| {
        clean(
            Path::new("/bin/sh"),
            &[
                top.join("install.sh").to_str().unwrap(),
                "--prefix",
                work.path().join("prefix").to_str().unwrap(),
                "--checksum",
                checksum.to_str().unwrap(),
            ],
            work.path(),
        )
    };
    // A checksum of other bytes.
    let checksum = PathBuf::from(format!("{}.sha256", tarball.display()));
    let line = std::fs::read_to_string(&checksum).unwrap();
    let flipped = if line.starts_with('0') { "1" } else { "0" };
    std::fs::write(&checksum, format!("{flipped}{}", &line[1..])).unwrap();
    let refused = install(&checksum);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stdout));
    assert!(
        text(&refused.stderr).contains("does not match"),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        !work.path().join("prefix").exists(),
        "installed despite the bad checksum"
    );
    // An unpacked file changed after the fact.
    std::fs::write(&checksum, &line).unwrap();
    std::fs::write(top.join("share/man/man1/cg-trace.1"), "tampered\n").unwrap();
    let refused = install(&checksum);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("SHA256SUMS"),
        "{}",
        text(&refused.stderr)
    );
    assert!(!work.path().join("prefix").exists());
}

/// Unpacks a fresh tarball into `work/unpacked`; returns the folder holding install.sh.
fn unpacked(work: &Path) -> PathBuf {
    let tarball = dist(&work.join("out"));
    let unpacked = work.join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let untar = clean(
        Path::new("/usr/bin/tar"),
        &["-xzf", tarball.to_str().unwrap()],
        &unpacked,
    );
    assert!(untar.status.success());
    unpacked.join(
        tarball
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".tar.gz"),
    )
}

/// Runs the unpacked `top/install.sh --prefix PREFIX`, which must refuse (exit 1).
fn install_refused(top: &Path, prefix: &Path, work: &Path) -> Output {
    let refused = clean(
        Path::new("/bin/sh"),
        &[
            top.join("install.sh").to_str().unwrap(),
            "--prefix",
            prefix.to_str().unwrap(),
        ],
        work,
    );
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stdout));
    refused
}

/// A folder under the prefix that is a symbolic link (planted by whoever can write to the
/// prefix) is refused before anything is installed: root's files do not follow it.
#[test]
fn install_refuses_a_symlinked_folder_inside_the_prefix() {
    let work = tempfile::tempdir().unwrap();
    let top = unpacked(work.path());
    let prefix = work.path().join("prefix");
    let elsewhere = work.path().join("elsewhere");
    std::fs::create_dir_all(prefix.join("share/man")).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, prefix.join("share/man/man1")).unwrap();
    let refused = install_refused(&top, &prefix, work.path());
    assert!(
        text(&refused.stderr).contains("symbolic link"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    assert!(!prefix.join("bin").exists(), "installed despite the link");
}

/// A file SHA256SUMS does not list is not installed unchecked: here the binary was replaced
/// and its line taken out, which `sha256sum --check` alone lets through.
#[test]
fn install_refuses_a_file_its_sha256sums_leaves_out() {
    let work = tempfile::tempdir().unwrap();
    let top = unpacked(work.path());
    let sums = std::fs::read_to_string(top.join("SHA256SUMS")).unwrap();
    let without: String = sums
        .lines()
        .filter(|l| !l.ends_with(" bin/cg-trace"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(without, sums, "SHA256SUMS lists the binary");
    std::fs::write(top.join("SHA256SUMS"), without).unwrap();
    std::fs::write(top.join("bin/cg-trace"), "#!/bin/sh\necho replaced\n").unwrap();
    let prefix = work.path().join("prefix");
    let refused = install_refused(&top, &prefix, work.path());
    assert!(
        text(&refused.stderr).contains("bin/cg-trace is not listed in SHA256SUMS"),
        "{}",
        text(&refused.stderr)
    );
    assert!(!prefix.exists(), "installed an unchecked file");
}
