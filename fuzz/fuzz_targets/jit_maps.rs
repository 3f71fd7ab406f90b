//! Symbol maps read as text: a JIT's `/tmp/perf-PID.map` (`START SIZE NAME`, hex) and
//! `/proc/kallsyms`. Both parsers get the whole input; every address the input names is
//! looked up.
#![no_main]

use cg_agent::functions::symbolize::{Kallsyms, PerfMap};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let perf_map = PerfMap::parse(&text);
    let kallsyms = Kallsyms::parse(&text);
    // Addresses around every hex number in the input, and the extremes.
    let mut addresses = vec![0, 1, u64::MAX];
    for word in text.split(|c: char| c.is_whitespace()) {
        if let Ok(value) = u64::from_str_radix(word.trim_start_matches("0x"), 16) {
            addresses.extend([value.saturating_sub(1), value, value.saturating_add(1)]);
        }
    }
    addresses.truncate(256);
    // Every entry (start, size, name) the input holds, to check lookups against.
    let entries: Vec<(u64, u64, &str)> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((start, size, parts.next()?.trim()))
        })
        .collect();
    for &address in &addresses {
        if let Some(name) = perf_map.find(address) {
            assert!(
                entries.iter().any(|&(start, size, n)| n == name
                    && start <= address
                    && address - start < size.max(1)),
                "{address:#x} named {name:?}, which no entry covers"
            );
        }
        if let Some(name) = kallsyms.find(address) {
            assert!(!name.is_empty() && text.contains(name));
        }
    }
});
