//! RAPL through perf: the input describes `/sys/bus/event_source/devices` (see
//! `cg_trace_fuzz::Tree`: the `power` and `power_core` PMUs' `type`, `cpumask`, `format/*`,
//! `events/energy-*` with `.scale` and `.unit`); the real reader discovers it and opens its
//! counters, which read as the values of the input's `!counts=A,B` line.
#![no_main]

use std::io;

use cg_agent::sources::{
    EnergySource as _, ReadContext,
    perf::{CounterReader, CounterRequest, PerfSource, discover_domains},
};
use cg_trace_fuzz::{Tree, check_domains, fresh_dir};
use libfuzzer_sys::fuzz_target;

/// Reads the given counts in turn, then the last one again.
struct Counts(Vec<u64>, usize);

impl CounterReader for Counts {
    fn read_count(&mut self) -> io::Result<u64> {
        let value = self.0.get(self.1).or(self.0.last()).copied().unwrap_or(0);
        self.1 += 1;
        Ok(value)
    }
}

fuzz_target!(|data: &[u8]| {
    let tree = Tree::parse(data);
    let counts: Vec<u64> = tree
        .updates
        .iter()
        .find(|(path, _)| path.as_os_str() == "counts")
        .map(|(_, v)| {
            String::from_utf8_lossy(v)
                .split(',')
                .filter_map(|c| c.trim().parse().ok())
                .take(4)
                .collect()
        })
        .unwrap_or_default();
    let root = fresh_dir();
    tree.write(&root);
    let host = tree.host();
    let listed = discover_domains(&root, &host);
    let opener = |_: &CounterRequest| -> io::Result<Box<dyn CounterReader>> {
        Ok(Box::new(Counts(counts.clone(), 0)))
    };
    let Ok(mut source) = PerfSource::open(&root, &host, &opener) else {
        return;
    };
    let listed = listed.expect("open succeeded, so listing the domains does");
    assert_eq!(listed, source.domains(), "listed and opened domains differ");
    check_domains(source.domains(), &host);
    let ctx = ReadContext {
        duration_ns: 100_000_000,
        busy_ns_per_cpu: &[],
        wall_start_ns: 0,
        wall_end_ns: 100_000_000,
    };
    for _ in 0..2 {
        if let Ok(joules) = source.read(&ctx) {
            assert_eq!(joules.len(), source.domains().len());
            // A reading is joules (finite, not negative), pending or unknown: never a
            // number that cannot be true.
            for j in joules.iter().filter_map(|r| r.joules()) {
                assert!(j.is_finite() && j >= 0.0, "{j} J read");
            }
        }
    }
});
