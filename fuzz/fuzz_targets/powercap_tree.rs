//! RAPL through powercap: the input describes a `/sys/class/powercap` tree (see
//! `cg_trace_fuzz::Tree`: zone directories with `name`, `energy_uj`, `max_energy_range_uj`),
//! the real reader discovers it, opens it and reads the updated counters once.
#![no_main]

use cg_agent::sources::{
    EnergySource as _, ReadContext,
    powercap::{PowercapSource, discover_domains},
};
use cg_trace_fuzz::{Tree, check_domains, fresh_dir};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let tree = Tree::parse(data);
    let root = fresh_dir();
    tree.write(&root);
    let host = tree.host();
    let listed = discover_domains(&root, &host);
    let Ok(mut source) = PowercapSource::open(&root, &host) else {
        return;
    };
    // `cg-trace sources` lists what a run would use.
    let listed = listed.expect("open succeeded, so listing the domains does");
    assert_eq!(listed, source.domains(), "listed and opened domains differ");
    check_domains(source.domains(), &host);
    tree.apply_updates(&root);
    let ctx = ReadContext {
        duration_ns: 100_000_000,
        busy_ns_per_cpu: &[],
        wall_start_ns: 0,
        wall_end_ns: 100_000_000,
    };
    if let Ok(joules) = source.read(&ctx) {
        assert_eq!(joules.len(), source.domains().len());
        // A reading is joules (finite, not negative), pending or unknown: never a number
        // that cannot be true.
        for j in joules.iter().filter_map(|r| r.joules()) {
            assert!(j.is_finite() && j >= 0.0, "{j} J read");
        }
    }
});
