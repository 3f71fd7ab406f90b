//! Turns sampled addresses into function names: native addresses through the process's
//! memory map and the mapped file's ELF symbols (demangled), addresses in anonymous memory
//! through the JIT's `/tmp/perf-PID.map` when there is one, kernel addresses through
//! `/proc/kallsyms`. Files are read once and their symbols kept sorted, so each distinct
//! address costs a binary search.
//!
//! Without frame pointers the kernel cannot walk a user stack past the first frame whose
//! code omits them: such stacks come out short or with a few wrong frames. Self figures (the
//! innermost frame) stay right; inclusive figures of callers are undercounted.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::Serialize;

use super::{elf::ElfInfo, maps::ProcMaps};

/// What kind of code a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    Native,
    Kernel,
    Python,
    /// Named by a JIT's perf map.
    Jit,
    /// No name could be found.
    Unknown,
}

/// A named stack frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// Function name (demangled; a Python function's qualified name).
    pub symbol: String,
    /// The binary or library's file name, `[kernel]`, or a Python function's source file.
    pub module: String,
    /// A Python function's first line.
    pub line: Option<u32>,
    pub kind: FrameKind,
}

impl Frame {
    pub fn unknown(module: &str) -> Self {
        Frame {
            symbol: "[unknown]".into(),
            module: module.into(),
            line: None,
            kind: FrameKind::Unknown,
        }
    }

    /// How the frame reads in folded stacks and flamegraphs.
    pub fn label(&self) -> String {
        match (self.kind, self.line) {
            (FrameKind::Python, Some(line)) => format!("{} ({}:{line})", self.symbol, self.module),
            (FrameKind::Kernel, _) => format!("{} [k]", self.symbol),
            (FrameKind::Unknown, _) => format!("[unknown] ({})", self.module),
            _ => self.symbol.clone(),
        }
    }
}

/// A JIT's symbol map (`/tmp/perf-PID.map`: `START SIZE NAME` in hex).
#[derive(Clone, Debug, Default)]
pub struct PerfMap {
    entries: Vec<(u64, u64, String)>,
}

impl PerfMap {
    pub fn parse(text: &str) -> Self {
        let mut entries: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ' ');
                let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                Some((start, size, parts.next()?.trim().to_string()))
            })
            .collect();
        entries.sort_by_key(|e| e.0);
        PerfMap { entries }
    }

    pub fn find(&self, address: u64) -> Option<&str> {
        let index = self.entries.partition_point(|e| e.0 <= address);
        let (start, size, name) = self.entries.get(index.checked_sub(1)?)?;
        (address < start + size.max(&1)).then_some(name.as_str())
    }
}

/// Kernel symbols (`/proc/kallsyms`), sorted.
#[derive(Clone, Debug, Default)]
pub struct Kallsyms {
    symbols: Vec<(u64, String)>,
}

impl Kallsyms {
    pub fn parse(text: &str) -> Self {
        let mut symbols: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let address = u64::from_str_radix(parts.next()?, 16).ok()?;
                let kind = parts.next()?;
                let name = parts.next()?;
                (address != 0 && matches!(kind, "t" | "T" | "w" | "W"))
                    .then(|| (address, name.to_string()))
            })
            .collect();
        symbols.sort_by_key(|s| s.0);
        Kallsyms { symbols }
    }

    pub fn find(&self, address: u64) -> Option<&str> {
        let index = self.symbols.partition_point(|s| s.0 <= address);
        self.symbols
            .get(index.checked_sub(1)?)
            .map(|s| s.1.as_str())
    }
}

/// Names addresses; caches every file it reads.
#[derive(Default)]
pub struct Symbolizer {
    elfs: HashMap<PathBuf, Option<Arc<ElfInfo>>>,
    kallsyms: Option<Kallsyms>,
    perf_maps: HashMap<u32, Option<PerfMap>>,
    /// Where `/tmp/perf-PID.map` files are (a root, for tests).
    pub perf_map_dir: PathBuf,
}

impl Symbolizer {
    pub fn new() -> Self {
        Symbolizer {
            perf_map_dir: PathBuf::from("/tmp"),
            ..Symbolizer::default()
        }
    }

    fn elf(&mut self, path: &Path) -> Option<Arc<ElfInfo>> {
        self.elfs
            .entry(path.to_path_buf())
            .or_insert_with(|| ElfInfo::open(path).ok().map(Arc::new))
            .clone()
    }

    /// Names a user-space address of process `pid` (`return_address`: a caller frame, whose
    /// address points after the call instruction).
    pub fn native(
        &mut self,
        pid: u32,
        maps: Option<&ProcMaps>,
        address: u64,
        return_address: bool,
    ) -> Frame {
        let lookup = if return_address {
            address.saturating_sub(1)
        } else {
            address
        };
        let mapping = maps.and_then(|m| m.find(lookup));
        match mapping.and_then(|m| m.path.clone().map(|p| (m, p))) {
            Some((m, path)) if !path.to_string_lossy().starts_with('[') => {
                let module = file_name(&path);
                let Some(elf) = self.elf(&path) else {
                    return Frame::unknown(&module);
                };
                let offset = lookup - m.start + m.offset;
                let Some(vaddr) = elf.vaddr_of_offset(offset) else {
                    return Frame::unknown(&module);
                };
                match elf.function_at(vaddr) {
                    Some(symbol) => Frame {
                        symbol: symbol.name.clone(),
                        module,
                        line: None,
                        kind: FrameKind::Native,
                    },
                    None => Frame::unknown(&module),
                }
            }
            Some((_, pseudo)) => Frame::unknown(&pseudo.to_string_lossy()),
            None => {
                let dir = self.perf_map_dir.clone();
                let map = self.perf_maps.entry(pid).or_insert_with(|| {
                    std::fs::read_to_string(dir.join(format!("perf-{pid}.map")))
                        .ok()
                        .map(|t| PerfMap::parse(&t))
                });
                match map.as_ref().and_then(|m| m.find(lookup)) {
                    Some(name) => Frame {
                        symbol: name.to_string(),
                        module: "[jit]".into(),
                        line: None,
                        kind: FrameKind::Jit,
                    },
                    None => Frame::unknown("[anon]"),
                }
            }
        }
    }

    /// Names a kernel address.
    pub fn kernel(&mut self, address: u64) -> Frame {
        let kallsyms = self.kallsyms.get_or_insert_with(|| {
            Kallsyms::parse(&std::fs::read_to_string("/proc/kallsyms").unwrap_or_default())
        });
        match kallsyms.find(address) {
            Some(name) => Frame {
                symbol: name.to_string(),
                module: "[kernel]".into(),
                line: None,
                kind: FrameKind::Kernel,
            },
            None => Frame::unknown("[kernel]"),
        }
    }
}

/// A path's file name, for module columns.
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Outermost native functions of complete stacks: a stack that reaches one of these (or a
/// program's `main`) was walked to its start.
pub fn is_stack_root(symbol: &str) -> bool {
    symbol.starts_with("std::rt::lang_start")
        || matches!(
            symbol,
            "main"
                | "_start"
                | "__libc_start_main"
                | "__libc_start_call_main"
                | "start_thread"
                | "clone"
                | "clone3"
                | "__clone"
                | "__clone3"
                | "thread_start"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_maps_and_kallsyms_find_the_enclosing_symbol() {
        let map = PerfMap::parse("7f0000001000 40 py::work:/tmp/w.py\n7f0000002000 10 jitted\n");
        assert_eq!(map.find(0x7f0000001010), Some("py::work:/tmp/w.py"));
        assert_eq!(map.find(0x7f0000001040), None);
        assert_eq!(map.find(0x7f000000200f), Some("jitted"));
        let k = Kallsyms::parse(
            "ffffffff81000000 T _text\nffffffff81001000 t do_thing\nffffffff81002000 D data\n",
        );
        assert_eq!(k.find(0xffffffff81001234), Some("do_thing"));
        assert_eq!(k.find(0xffffffff80000000), None);
    }

    #[test]
    fn names_this_processs_own_functions() {
        #[inline(never)]
        fn marker() -> u64 {
            std::hint::black_box(42)
        }
        let maps = ProcMaps::read(Path::new("/proc"), std::process::id()).unwrap();
        let mut symbolizer = Symbolizer::new();
        let frame = symbolizer.native(
            std::process::id(),
            Some(&maps),
            marker as *const () as u64,
            false,
        );
        assert_eq!(frame.kind, FrameKind::Native);
        assert!(frame.symbol.ends_with("marker"), "{frame:?}");
        let unknown = symbolizer.native(std::process::id(), Some(&maps), 0x10, false);
        assert_eq!(unknown.kind, FrameKind::Unknown);
    }
}
