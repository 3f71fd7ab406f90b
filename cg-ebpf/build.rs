//! Rebuild the eBPF object when the `bpf-linker` binary changes (cargo cannot track it itself).
fn main() {
    if let Ok(bpf_linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", bpf_linker.display());
    }
}
