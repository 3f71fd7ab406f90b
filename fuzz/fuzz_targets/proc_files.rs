//! The `/proc` and `/sys` files cg-trace reads as text: `/proc/PID/stat`, `cmdline`,
//! `cgroup`, `task/TID/schedstat`, `maps` and the kernel's CPU
//! lists (`/sys/devices/system/cpu/possible`, a PMU's `cpumask`). Every parser gets the
//! whole input.
#![no_main]

use cg_agent::{
    cgroup::{MAX_PATH_BYTES, classify, parse_proc_cgroup},
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
    if let Ok(path) = parse_proc_cgroup(data) {
        // A path the file holds, as the kernel writes one.
        assert!(path.starts_with('/') && path.len() <= MAX_PATH_BYTES);
        assert!(!path.chars().any(char::is_control), "{path:?}");
        let info = classify(path);
        let components: Vec<&str> = path.split('/').collect();
        if let Some(id) = &info.container_id {
            assert!((12..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(path.contains(id.as_str()));
        }
        if let Some(uid) = &info.pod_uid {
            assert!(
                uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'),
                "{uid:?}"
            );
        }
        if let Some(unit) = &info.systemd_unit {
            assert!(
                components.contains(&unit.as_str()),
                "{unit:?} not a component"
            );
        }
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
