//! The `/proc` and `/sys` files cg-trace reads as text: `/proc/PID/stat`, `cmdline`,
//! `task/TID/schedstat`, `maps` and the kernel's CPU
//! lists (`/sys/devices/system/cpu/possible`, a PMU's `cpumask`). Every parser gets the
//! whole input.
#![no_main]

use cg_agent::{
    functions::maps::ProcMaps,
    host::parse_cpu_list,
    probes::parse_schedstat_runtime_ns,
    session::processes::{parse_cmdline, parse_stat},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for arg in parse_cmdline(data) {
        assert!(!arg.is_empty() && !arg.contains('\0'));
    }
    let text = String::from_utf8_lossy(data);

    if let Some((comm, _ppid)) = parse_stat(&text) {
        assert!(
            comm.len() + 2 <= text.len(),
            "comm {comm:?} longer than the line"
        );
    }
    let _ = parse_schedstat_runtime_ns(&text);

    if let Some(cpus) = parse_cpu_list(&text) {
        // A CPU list names each CPU once; there are never more CPUs than the kernel allows.
        assert!(cpus.len() <= 1 << 16, "{} CPUs", cpus.len());
    }

    let maps = ProcMaps::parse(&text);
    for w in maps.mappings.windows(2) {
        assert!(w[0].start <= w[1].start, "mappings not sorted");
    }
    for m in &maps.mappings {
        for address in [m.start, m.end.saturating_sub(1), m.end] {
            if let Some(found) = maps.find(address) {
                assert!(found.start <= address && address < found.end);
            }
        }
    }
    for file in maps.files() {
        assert!(!file.to_string_lossy().starts_with('['));
    }
});
