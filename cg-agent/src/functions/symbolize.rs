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
        (address - start < *size.max(&1)).then_some(name.as_str())
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
        self.index_at(address).map(|i| self.symbols[i].1.as_str())
    }

    /// The index of the symbol containing `address`.
    pub fn index_at(&self, address: u64) -> Option<usize> {
        let index = self.symbols.partition_point(|s| s.0 <= address);
        index.checked_sub(1)
    }
}

/// An interned frame: an index into [`Symbolizer::frames`].
pub type FrameId = u32;

/// Names addresses and interns the frames; caches every file it reads, and each function's
/// frame, so that a distinct address costs a map lookup and two binary searches.
#[derive(Default)]
pub struct Symbolizer {
    elfs: HashMap<PathBuf, Option<Arc<ElfInfo>>>,
    /// The file looked up last (by the map's shared path): consecutive frames are mostly in
    /// one file.
    last: Option<(Arc<PathBuf>, Option<Arc<ElfInfo>>)>,
    kallsyms: Option<Kallsyms>,
    perf_maps: HashMap<u32, Option<PerfMap>>,
    /// Where `/tmp/perf-PID.map` files are (a root, for tests).
    pub perf_map_dir: PathBuf,
    frames: Vec<Frame>,
    frame_ids: HashMap<Frame, FrameId>,
    /// (file, function index) -> frame.
    by_function: HashMap<(usize, usize), FrameId>,
    /// Kernel symbol index -> frame.
    by_kernel_symbol: HashMap<usize, FrameId>,
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

    /// The id of `frame`, interning it when new.
    pub fn intern(&mut self, frame: Frame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frame_ids.insert(frame.clone(), id);
        self.frames.push(frame);
        id
    }

    /// A frame by id.
    pub fn frame(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    /// Every frame interned so far, by id.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// Every frame interned, by id.
    pub fn into_frames(self) -> Vec<Frame> {
        self.frames
    }

    /// Names a user-space address of process `pid` (`return_address`: a caller frame, whose
    /// address points after the call instruction).
    pub fn native(
        &mut self,
        pid: u32,
        maps: Option<&ProcMaps>,
        address: u64,
        return_address: bool,
    ) -> FrameId {
        let lookup = if return_address {
            address.saturating_sub(1)
        } else {
            address
        };
        let mapping = maps.and_then(|m| m.find(lookup));
        match mapping.and_then(|m| m.path.clone().map(|p| (m, p))) {
            Some((m, path)) if !path.as_os_str().as_encoded_bytes().starts_with(b"[") => {
                let elf = match &self.last {
                    Some((last, elf)) if Arc::ptr_eq(last, &path) => elf.clone(),
                    _ => {
                        let elf = self.elf(&path);
                        self.last = Some((path.clone(), elf.clone()));
                        elf
                    }
                };
                let found = elf.as_ref().and_then(|elf| {
                    let vaddr = elf.vaddr_of_offset(lookup - m.start + m.offset)?;
                    Some((Arc::as_ptr(elf) as usize, elf.function_index_at(vaddr)?))
                });
                let Some(key) = found else {
                    return self.intern(Frame::unknown(&file_name(&path)));
                };
                if let Some(&id) = self.by_function.get(&key) {
                    return id;
                }
                let symbol = elf.map_or_else(String::new, |e| e.functions[key.1].name.clone());
                let id = self.intern(Frame {
                    symbol,
                    module: file_name(&path),
                    line: None,
                    kind: FrameKind::Native,
                });
                self.by_function.insert(key, id);
                id
            }
            Some((_, pseudo)) => self.intern(Frame::unknown(&pseudo.to_string_lossy())),
            None => {
                let dir = self.perf_map_dir.clone();
                let map = self.perf_maps.entry(pid).or_insert_with(|| {
                    std::fs::read_to_string(dir.join(format!("perf-{pid}.map")))
                        .ok()
                        .map(|t| PerfMap::parse(&t))
                });
                let frame = match map.as_ref().and_then(|m| m.find(lookup)) {
                    Some(name) => Frame {
                        symbol: name.to_string(),
                        module: "[jit]".into(),
                        line: None,
                        kind: FrameKind::Jit,
                    },
                    None => Frame::unknown("[anon]"),
                };
                self.intern(frame)
            }
        }
    }

    /// Names a kernel address.
    pub fn kernel(&mut self, address: u64) -> FrameId {
        let kallsyms = self.kallsyms.get_or_insert_with(|| {
            Kallsyms::parse(&std::fs::read_to_string("/proc/kallsyms").unwrap_or_default())
        });
        let Some(index) = kallsyms.index_at(address) else {
            return self.intern(Frame::unknown("[kernel]"));
        };
        if let Some(&id) = self.by_kernel_symbol.get(&index) {
            return id;
        }
        let symbol = kallsyms.symbols[index].1.clone();
        let id = self.intern(Frame {
            symbol,
            module: "[kernel]".into(),
            line: None,
            kind: FrameKind::Kernel,
        });
        self.by_kernel_symbol.insert(index, id);
        id
    }
}

/// `cg-trace --bench-symbolize N` (for `cargo xtask bench`): names N synthetic samples, each
/// a distinct stack of 8 to 24 addresses inside the functions of cg-trace's own executable and
/// libraries, through the same path as a run's stacks (memory map, ELF symbols, interning).
/// Real profiles repeat stacks and are cheaper: this is the worst case. Returns the line to
/// print.
pub fn bench(samples: usize) -> Result<String, String> {
    let pid = std::process::id();
    let maps =
        ProcMaps::read(Path::new("/proc"), pid).map_err(|e| format!("/proc/self/maps: {e}"))?;
    let started = std::time::Instant::now();
    let mut symbolizer = Symbolizer::new();
    // Addresses of functions in every mapped executable file.
    let mut targets: Vec<(u64, u64)> = Vec::new();
    for m in maps.mappings.iter().filter(|m| m.executable) {
        let Some(path) = m.path.as_ref() else {
            continue;
        };
        let Some(elf) = symbolizer.elf(path) else {
            continue;
        };
        for f in elf.functions.iter().filter(|f| f.size > 0) {
            let Some(offset) = elf.file_offset(f.address) else {
                continue;
            };
            if offset >= m.offset && offset + f.size <= m.offset + (m.end - m.start) {
                targets.push((m.start + offset - m.offset, f.size));
            }
        }
    }
    if targets.is_empty() {
        return Err("no function symbols found in cg-trace's own mappings".into());
    }
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let stacks: Vec<Vec<u64>> = (0..samples)
        .map(|_| {
            let depth = 8 + (next() % 17) as usize;
            (0..depth)
                .map(|_| {
                    let (start, size) = targets[(next() % targets.len() as u64) as usize];
                    start + next() % size.max(1)
                })
                .collect()
        })
        .collect();
    let started = std::time::Instant::now();
    let mut stack_ids: HashMap<Vec<FrameId>, u32> = HashMap::new();
    let mut addresses = 0usize;
    for stack in &stacks {
        let ids: Vec<FrameId> = stack
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                addresses += 1;
                symbolizer.native(pid, Some(&maps), a, i > 0)
            })
            .collect();
        let next_id = stack_ids.len() as u32;
        stack_ids.entry(ids).or_insert(next_id);
    }
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let frames = symbolizer.frames.len();
    Ok(format!(
        "symbolized {samples} samples ({} distinct stacks, {addresses} addresses, {} distinct \
         frames) in {ms:.1} ms (measured), after {load_ms:.1} ms reading the symbol tables \
         of {} functions",
        stack_ids.len(),
        frames,
        targets.len()
    ))
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

    /// Found by the `jit_maps` fuzz target: an entry whose end passes 2^64 overflowed.
    #[test]
    fn a_perf_map_entry_that_runs_past_the_address_space_is_looked_up_without_overflow() {
        let map = PerfMap::parse(include_str!(
            "../../../fuzz/regressions/jit_maps/perf-map-entry-past-u64-max"
        ));
        assert_eq!(map.find(0xffffffff81002000), Some(""));
        assert_eq!(map.find(u64::MAX), Some(""));
        assert_eq!(map.find(0xffffffff81001fff), None);
    }

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
        let id = symbolizer.native(
            std::process::id(),
            Some(&maps),
            marker as *const () as u64,
            false,
        );
        let frame = symbolizer.frame(id).clone();
        assert_eq!(frame.kind, FrameKind::Native);
        assert!(frame.symbol.ends_with("marker"), "{frame:?}");
        let again = symbolizer.native(
            std::process::id(),
            Some(&maps),
            marker as *const () as u64 + 1,
            false,
        );
        assert_eq!(again, id);
        let unknown = symbolizer.native(std::process::id(), Some(&maps), 0x10, false);
        assert_eq!(symbolizer.frame(unknown).kind, FrameKind::Unknown);
    }
}
