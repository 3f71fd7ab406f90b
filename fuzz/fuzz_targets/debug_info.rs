//! Separate debug information a stripped file is named from: MiniDebugInfo (an xz stream of
//! an ELF file, `.gnu_debugdata`) and raw symbol tables of debug files. Input: the bytes, used
//! as all three. Checks the bounds the callers rely on: decompression never yields more than
//! it was allowed, and every symbol found has a name, an address and a limit past it.
#![no_main]

use cg_agent::functions::{
    debuginfo,
    elf::{self, Symbol},
};
use libfuzzer_sys::fuzz_target;
use object::Endianness;

fn check(symbols: &[Symbol]) {
    for s in symbols {
        assert!(s.address != 0, "a symbol at address 0");
        assert!(!s.raw.is_empty(), "a symbol without a name");
        assert!(s.limit > s.address, "{} ends before it starts", s.raw);
    }
}

fuzz_target!(|data: &[u8]| {
    const MAX_BYTES: u64 = 1 << 20;
    if let Ok(out) = debuginfo::xz_decompress(data, MAX_BYTES) {
        assert!(out.len() as u64 <= MAX_BYTES, "{} bytes out", out.len());
    }
    if let Ok(symbols) = debuginfo::mini_debuginfo_symbols(data) {
        check(&symbols);
    }
    // The same bytes as a symbol table whose strings are its own bytes, sections ending
    // at addresses also taken from the input.
    let ends: Vec<u64> = data
        .chunks_exact(8)
        .take(16)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    check(&elf::function_symbols(
        Endianness::Little,
        data,
        data,
        &ends,
        |address| address.saturating_add(1),
    ));
});
