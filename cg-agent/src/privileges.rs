//! Checks, before anything is loaded, that we may load eBPF programs: root, or the
//! capabilities CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN also allows it).

use std::fs;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process.
fn effective_caps() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn has(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// `Err(message)` when the process can't load the probes, with what to do about it.
pub fn check_can_trace() -> Result<(), String> {
    let caps = effective_caps();
    if has(caps, CAP_SYS_ADMIN) || (has(caps, CAP_BPF) && has(caps, CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|(cap, _)| !has(caps, *cap))
        .map(|(_, name)| name)
        .collect();
    Err(format!(
        "cg-trace needs root, or the capabilities CAP_BPF and CAP_PERFMON (missing: {}), to load \
         its eBPF probes: run it with sudo, or grant them with \
         `sudo setcap cap_bpf,cap_perfmon+ep $(command -v cg-trace)`",
        missing.join(", ")
    ))
}
