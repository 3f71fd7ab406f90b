//! What matching `--func` globs against a binary's symbols costs: each pattern against every
//! function symbol (demangled name, then raw name, as `functions::resolve` does) of an ELF
//! file, best of several rounds, in nanoseconds per symbol. Prints figures; asserts nothing.
//!
//! `cargo run --release -p cg-agent --example glob_bench -- [ELF]` (default: this binary).

use std::{path::PathBuf, time::Instant};

use cg_agent::functions::{elf::ElfInfo, spec::SymbolGlob};

const PATTERNS: &[&str] = &[
    "compress_*",
    "*alloc*",
    "core::fmt::*",
    "*::{{closure}}",
    "[a-c]*_?",
    "std::*::write*",
    "cg_agent::*::new",
    "main",
];

fn main() {
    let path = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_exe().expect("current_exe"));
    let elf = ElfInfo::open(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let symbols = &elf.functions;
    println!(
        "{}: {} function symbols; ns per symbol (name, then raw name), best of 7 rounds",
        path.display(),
        symbols.len()
    );
    let mut total_ns = 0.0;
    for pattern in PATTERNS {
        let mut best_ns = f64::INFINITY;
        let mut matched = 0;
        for _ in 0..7 {
            let started = Instant::now();
            // Compiled once per SPEC, as resolve does.
            let glob = SymbolGlob::new(pattern).expect("pattern");
            matched = symbols
                .iter()
                .filter(|s| glob.is_match(s.name()) || glob.is_match(&s.raw))
                .count();
            best_ns = best_ns.min(started.elapsed().as_nanos() as f64);
        }
        let per_symbol_ns = best_ns / symbols.len().max(1) as f64;
        total_ns += per_symbol_ns;
        println!("{pattern:>20}: {per_symbol_ns:8.1} ns/symbol, {matched} matched");
    }
    println!(
        "{:>20}: {:8.1} ns/symbol",
        "mean",
        total_ns / PATTERNS.len() as f64
    );
}
