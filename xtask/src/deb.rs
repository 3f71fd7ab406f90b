//! `cargo xtask deb`: the Debian package, through cargo-deb (`cargo install cargo-deb`; not
//! installed by `setup`: the tarball of `dist` is the install that needs nothing). Builds the
//! release binary, has it generate its man pages and completions into `target/release/share/`
//! (where `[package.metadata.deb]` in cg-agent/Cargo.toml takes them from), then packs
//! `target/debian/cg-trace_VERSION-1_ARCH.deb`.

use std::process::Command;

use anyhow::{Result, bail};

use crate::{cargo, dist::write_generated, root, status};

pub fn run(args: &[String]) -> Result<()> {
    if let Some(other) = args.first() {
        bail!("deb takes no arguments, not {other:?}");
    }
    if !Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        bail!("cargo-deb is not installed: cargo install cargo-deb");
    }
    status(cargo().args(["build", "--release", "-p", "cg-agent", "--bin", "cg-trace"]))?;
    let release = root().join("target/release");
    write_generated(&release.join("cg-trace"), &release)?;
    status(cargo().args(["deb", "-p", "cg-agent", "--no-build"]))
}
