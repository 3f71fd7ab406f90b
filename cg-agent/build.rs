//! Builds the eBPF object (cg-ebpf) with the nightly toolchain and bpf-linker, through
//! aya-build, into OUT_DIR where `probes` includes it. `cargo xtask setup` installs what this
//! needs on a fresh machine. Without the `ebpf` feature (the fuzz targets) it builds nothing.

#[cfg(feature = "ebpf")]
fn main() -> anyhow::Result<()> {
    use anyhow::{Context as _, anyhow};

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
    )
}

#[cfg(not(feature = "ebpf"))]
fn main() -> anyhow::Result<()> {
    println!("cargo::rerun-if-changed=build.rs");
    Ok(())
}
