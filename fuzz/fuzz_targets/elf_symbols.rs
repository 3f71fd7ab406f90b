//! ELF files (executables and libraries a run probes or symbolizes, CPython interpreters):
//! the input is the file. Checks what the callers rely on: functions sorted and findable at
//! their own address, prologues and data values taken from the file itself, lookups that
//! never panic; source lines (DWARF) read from the same file, with names and paths bounded.
#![no_main]

use std::path::Path;

use cg_agent::functions::{
    elf::ElfInfo,
    lines::{SourceLines, TEXT_MAX_CHARS},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(elf) = ElfInfo::parse(
        Path::new("/fuzz/libpython3.13.so"),
        data,
        &["_PyRuntime", "Py_Version"],
    ) else {
        source_lines(data, &[0, 1, u64::MAX]);
        return;
    };
    assert_eq!(elf.prologues.len(), elf.functions.len());
    for w in elf.functions.windows(2) {
        assert!(w[0].address <= w[1].address, "functions not sorted");
        assert!(
            (w[0].address, &w[0].raw) != (w[1].address, &w[1].raw),
            "{} twice",
            w[0].raw
        );
    }
    let mut addresses = vec![0, u64::MAX];
    for (i, (f, prologue)) in elf
        .functions
        .iter()
        .zip(&elf.prologues)
        .take(512)
        .enumerate()
    {
        assert!(f.address != 0 && !f.raw.is_empty());
        let found = elf
            .function_at(f.address)
            .expect("a function at its own address");
        assert_eq!(found.address, f.address);
        let code = trimmed(prologue);
        if i < 16 && !code.is_empty() {
            assert!(
                data.windows(code.len()).any(|w| w == code),
                "prologue of {} is not in the file",
                f.raw
            );
        }
        addresses.extend([
            f.address,
            f.address.saturating_add(f.size),
            f.address.wrapping_sub(1),
        ]);
    }
    for (name, _address, value) in &elf.data {
        assert!(value.len() <= 16, "{name}: {} bytes", value.len());
    }
    for s in &elf.segments {
        addresses.extend([s.vaddr, s.vaddr.wrapping_add(s.filesz), s.offset]);
    }
    for &address in &addresses {
        let _ = elf.function_at(address);
        if let Some(offset) = elf.file_offset(address) {
            let _ = elf.vaddr_of_offset(offset);
        }
        let _ = elf.vaddr_of_offset(address);
    }
    source_lines(data, &addresses);
});

/// Looks `addresses` up in the file's line tables, if it has any.
fn source_lines(data: &[u8], addresses: &[u64]) {
    let Ok(Some(lines)) = SourceLines::parse(data) else {
        return;
    };
    for &address in addresses.iter().take(256) {
        for frame in lines.frames(address) {
            for text in [&frame.function, &frame.file].into_iter().flatten() {
                assert!(text.chars().count() <= TEXT_MAX_CHARS);
            }
        }
    }
}

/// A prologue without the zero padding after the bytes the file had.
fn trimmed(prologue: &[u8; 16]) -> &[u8] {
    let len = prologue.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &prologue[..len]
}
