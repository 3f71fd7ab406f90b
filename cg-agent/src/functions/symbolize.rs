//! Turns sampled addresses into function names: native addresses through the process's
//! memory map and the mapped file's ELF symbols (demangled; a stripped file's from its
//! separate debug file or MiniDebugInfo, see [`super::debuginfo`]; an address no symbol
//! covers as `file+0xADDRESS`, as perf says it), addresses in anonymous memory
//! through the JIT's `/tmp/perf-PID.map` when there is one (read only when it is a regular
//! file owned by the process's user, as perf does, and bounded), kernel addresses through
//! `/proc/kallsyms`. Files are read once and their symbols kept sorted, so each distinct
//! address costs a binary search.
//!
//! Without frame pointers the kernel cannot walk a user stack past the first frame whose
//! code omits them: such stacks come out short or with a few wrong frames. Self figures (the
//! innermost frame) stay right; inclusive figures of callers are undercounted.
//!
//! A process's uids come from `/proc/PID/status` by hand ([`ProcessUids`]): 11.0-12.2 µs, where
//! procfs 0.17's `status()`, which parses every line, takes 79-84 % longer (`cargo xtask bench
//! --proc`: release build, this 2-CPU VM's ~100 processes, median of 31 rounds, three runs).

use std::{
    collections::HashMap,
    io::Read,
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    rc::Rc,
    sync::Arc,
};

use serde::Serialize;

use super::{
    debuginfo::{self, DebugDirs, SymbolSource},
    elf::ElfInfo,
    lines::{DWARF_TOTAL_MAX_BYTES, SourceLines},
    maps::ProcMaps,
};

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

/// The name of the remainder of a process's energy that no sample carried (a frame of its
/// own, and an entry of the report's function lists).
pub const UNSAMPLED: &str = "[unsampled]";

/// A named stack frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// Function name (demangled; a Python function's qualified name).
    pub symbol: String,
    /// The binary or library's file name, `[kernel]`, or a Python function's source file.
    pub module: String,
    /// A Python function's first line; a native frame's source line (with `file`).
    pub line: Option<u32>,
    /// A native frame's source file, from the binary's line tables (`--no-lines` leaves it
    /// out).
    pub file: Option<String>,
    /// A native frame of a function inlined into its caller (the next frame out).
    pub inlined: bool,
    pub kind: FrameKind,
}

impl Frame {
    /// A frame of `kind` named `symbol` in `module`, without source line.
    pub fn named(symbol: String, module: String, kind: FrameKind) -> Self {
        Frame {
            symbol,
            module,
            line: None,
            file: None,
            inlined: false,
            kind,
        }
    }

    pub fn unknown(module: &str) -> Self {
        Frame::named("[unknown]".into(), module.into(), FrameKind::Unknown)
    }

    /// The frame of a process's energy that no sample carried ([`UNSAMPLED`]).
    pub fn unsampled() -> Self {
        Frame::named(UNSAMPLED.into(), String::new(), FrameKind::Unknown)
    }

    /// A frame in file `module` that no symbol covers, at `address` (the address in the
    /// file's own address space, what `addr2line -e FILE`, `nm` and `objdump` use; the file
    /// offset when the file could not be read): `gzip+0x1a2f0`, as perf says it.
    pub fn unknown_at(module: &str, address: u64) -> Self {
        Frame::named(
            format!("{module}+{address:#x}"),
            module.into(),
            FrameKind::Unknown,
        )
    }

    /// The frame of the function this frame is a line of (itself when it has no source
    /// line): what function figures add up over.
    pub fn function(&self) -> Self {
        match self.kind {
            FrameKind::Native => Frame::named(self.symbol.clone(), self.module.clone(), self.kind),
            _ => self.clone(),
        }
    }

    /// How the frame reads in folded stacks and flamegraphs: `function`, a Python
    /// function's `qualname (file.py:FIRST_LINE)`, a native frame's `function (file.c:LINE)`
    /// (`(inlined)` after it when it was inlined, as perf says it).
    pub fn label(&self) -> String {
        match (self.kind, self.line) {
            (FrameKind::Python, Some(line)) => format!("{} ({}:{line})", self.symbol, self.module),
            (FrameKind::Native, Some(line)) if self.file.is_some() => format!(
                "{} ({}:{line}){}",
                self.symbol,
                self.file.as_deref().map_or("", base_name),
                if self.inlined { " (inlined)" } else { "" }
            ),
            (FrameKind::Kernel, _) => format!("{} [k]", self.symbol),
            (FrameKind::Unknown, _) if self.symbol == "[unknown]" => {
                format!("[unknown] ({})", self.module)
            }
            _ => self.symbol.clone(),
        }
    }
}

/// The largest JIT map read; a bigger one is refused (with a note).
pub const PERF_MAP_MAX_BYTES: u64 = 64 << 20;
/// Lines of a JIT map longer than this are skipped.
pub const PERF_MAP_MAX_LINE: usize = 4096;

/// The users whose JIT map of a process is believed: its effective and file-system uids,
/// read from `/proc/PID/status` while it runs (the JIT writes its map as one of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessUids {
    pub euid: u32,
    pub fsuid: u32,
}

impl ProcessUids {
    pub fn read(proc_root: &Path, pid: u32) -> Option<Self> {
        let status =
            std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
        let ids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // real, effective, saved, file system
        Some(ProcessUids {
            euid: *ids.get(1)?,
            fsuid: *ids.get(3)?,
        })
    }

    fn owns(&self, uid: u32) -> bool {
        uid == self.euid || uid == self.fsuid
    }
}

/// Why a JIT map was not read.
#[derive(Debug, thiserror::Error)]
pub enum PerfMapError {
    #[error("it is a symbolic link")]
    Link,
    #[error("it is not a regular file")]
    NotRegular,
    #[error("it belongs to uid {owner}, not to the process's user (uid {euid})")]
    Owner { owner: u32, euid: u32 },
    #[error("it is larger than {} MiB ({bytes} bytes)", PERF_MAP_MAX_BYTES >> 20)]
    TooLarge { bytes: u64 },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A JIT's symbol map (`/tmp/perf-PID.map`: `START SIZE NAME` in hex).
#[derive(Clone, Debug, Default)]
pub struct PerfMap {
    entries: Vec<(u64, u64, String)>,
}

impl PerfMap {
    /// Reads the map at `path` when it is a regular file owned by `owner`'s user and at most
    /// [`PERF_MAP_MAX_BYTES`]: opened without following links (and without blocking on a
    /// FIFO), checked on the descriptor, read up to the bound. `Ok(None)`: there is none.
    pub fn read(path: &Path, owner: ProcessUids) -> Result<Option<Self>, PerfMapError> {
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
                return Err(PerfMapError::Link);
            }
            Err(err) => return Err(err.into()),
        };
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(PerfMapError::NotRegular);
        }
        if !owner.owns(meta.uid()) {
            return Err(PerfMapError::Owner {
                owner: meta.uid(),
                euid: owner.euid,
            });
        }
        if meta.len() > PERF_MAP_MAX_BYTES {
            return Err(PerfMapError::TooLarge { bytes: meta.len() });
        }
        let mut bytes = Vec::new();
        file.take(PERF_MAP_MAX_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > PERF_MAP_MAX_BYTES {
            // It grew while we read it.
            return Err(PerfMapError::TooLarge {
                bytes: bytes.len() as u64,
            });
        }
        Ok(Some(Self::parse(&String::from_utf8_lossy(&bytes))))
    }

    /// Parses the text of a map; malformed lines and lines longer than
    /// [`PERF_MAP_MAX_LINE`] are skipped.
    pub fn parse(text: &str) -> Self {
        let mut entries: Vec<(u64, u64, String)> = text
            .lines()
            .filter(|line| line.len() <= PERF_MAP_MAX_LINE)
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
    /// Where separate debug files are looked up.
    debug_dirs: DebugDirs,
    /// Where each file's symbols came from.
    sources: Vec<(PathBuf, SymbolSource)>,
    /// Files that had frames no symbol covered.
    unnamed_files: std::collections::BTreeSet<String>,
    /// The file looked up last (by the map's shared path): consecutive frames are mostly in
    /// one file.
    last: Option<(Arc<PathBuf>, Option<Arc<ElfInfo>>)>,
    kallsyms: Option<Kallsyms>,
    perf_maps: HashMap<u32, Option<PerfMap>>,
    /// Whose JIT maps are believed, per process (unknown: not read).
    perf_map_owners: HashMap<u32, ProcessUids>,
    /// One line per JIT map, debug file or MiniDebugInfo refused.
    notes: Vec<String>,
    /// Where `/tmp/perf-PID.map` files are (a root, for tests).
    pub perf_map_dir: PathBuf,
    frames: Vec<Frame>,
    frame_ids: HashMap<Frame, FrameId>,
    /// (file, function index) -> frame.
    by_function: HashMap<(usize, usize), FrameId>,
    /// Kernel symbol index -> frame.
    by_kernel_symbol: HashMap<usize, FrameId>,
    /// Whether native frames are named down to their source lines (and inlined functions).
    lines: bool,
    /// (file, address in it) -> frames, innermost first, when `lines`.
    by_address: HashMap<(usize, u64), Vec<FrameId>>,
    /// Each file's line tables (`None`: it has none, or they could not be read).
    line_tables: HashMap<usize, Option<Rc<SourceLines>>>,
    /// DWARF bytes the line tables keep, all files together.
    line_bytes: u64,
    /// Once it says so, no further file's line tables are read ([`Symbolizer::lines_until`]).
    lines_until: Option<Box<dyn Fn() -> bool>>,
    /// Files whose line tables were not read because of `lines_until`.
    lines_cut: u64,
}

/// Where a native address was found: the file (by its [`ElfInfo`]'s address, as the
/// caches key it), its path, and the address in the file's own address space.
struct InFile {
    elf: usize,
    path: Arc<PathBuf>,
    vaddr: u64,
}

impl Symbolizer {
    pub fn new() -> Self {
        Self::with_debug_dirs(DebugDirs::default())
    }

    /// A symbolizer that looks up separate debug files in `debug_dirs`.
    pub fn with_debug_dirs(debug_dirs: DebugDirs) -> Self {
        Symbolizer {
            perf_map_dir: PathBuf::from("/tmp"),
            debug_dirs,
            ..Symbolizer::default()
        }
    }

    fn elf(&mut self, path: &Path) -> Option<Arc<ElfInfo>> {
        if let Some(known) = self.elfs.get(path) {
            return known.clone();
        }
        let (elf, source) = match load_symbols(path, &self.debug_dirs, &mut self.notes) {
            Some((elf, source)) => (Some(Arc::new(elf)), source),
            None => (None, SymbolSource::DynamicOnly),
        };
        tracing::debug!("{}: symbols from {source:?}", path.display());
        self.sources.push((path.to_path_buf(), source));
        self.elfs.insert(path.to_path_buf(), elf.clone());
        elf
    }

    /// Names native frames down to their source lines and inlined functions where the
    /// files have line tables ([`Symbolizer::native_frames`]).
    pub fn with_lines(mut self, lines: bool) -> Self {
        self.lines = lines;
        self
    }

    /// Reads no further file's line tables once `stop` says so (their frames are named by
    /// function, as with `--no-lines`, and a note says how many files): how naming after a
    /// run gives way to a stop signal.
    pub fn lines_until(mut self, stop: impl Fn() -> bool + 'static) -> Self {
        self.lines_until = Some(Box::new(stop));
        self
    }

    /// Where each file read so far got its function symbols.
    pub fn symbol_sources(&self) -> &[(PathBuf, SymbolSource)] {
        &self.sources
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

    /// The users whose JIT map of process `pid` is believed; without them, its map is not
    /// read.
    pub fn set_process_uids(&mut self, pid: u32, uids: ProcessUids) {
        self.perf_map_owners.insert(pid, uids);
    }

    /// One line per JIT map, debug file or MiniDebugInfo that was refused, and one naming
    /// the files with frames no symbol covered whose only symbols were their exported ones,
    /// for the report's notes.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.notes.clone();
        if self.lines_cut > 0 {
            notes.push(format!(
                "source lines not read for {} file(s): a stop signal came while the stacks were \
                 being named; their frames are named by function only",
                self.lines_cut
            ));
        }
        let stripped: Vec<String> = self
            .sources
            .iter()
            .filter(|(_, source)| *source == SymbolSource::DynamicOnly)
            .map(|(path, _)| file_name(path))
            .filter(|name| self.unnamed_files.contains(name))
            .collect();
        if !stripped.is_empty() {
            notes.push(format!(
                "stripped, no debug file found (looked in {}): {}; their frames that no \
                 exported symbol covers show as FILE+0xADDRESS (addr2line -e FILE resolves \
                 them); install their debug packages (-dbgsym, -debuginfo) or give \
                 --debug-dir",
                self.debug_dirs
                    .0
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                stripped.join(", ")
            ));
        }
        notes
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
        self.native_in_file(pid, maps, address, return_address).0
    }

    /// The frames at a user-space address of process `pid`, innermost first: with lines
    /// on and line tables in the file (or its debug file), the functions inlined there, each
    /// at its line, then the function they were inlined into at its line; else the one frame
    /// [`Symbolizer::native`] gives. Each line's function has a frame of its own too (see
    /// [`function_frames`]).
    pub fn native_frames(
        &mut self,
        pid: u32,
        maps: Option<&ProcMaps>,
        address: u64,
        return_address: bool,
    ) -> Vec<FrameId> {
        let (function, found) = self.native_in_file(pid, maps, address, return_address);
        let Some(at) = found.filter(|_| self.lines) else {
            return vec![function];
        };
        if let Some(ids) = self.by_address.get(&(at.elf, at.vaddr)) {
            return ids.clone();
        }
        let ids = self.line_frames(function, &at);
        self.by_address.insert((at.elf, at.vaddr), ids.clone());
        ids
    }

    /// The frames of `function` at `at` from its file's line tables, innermost first.
    fn line_frames(&mut self, function: FrameId, at: &InFile) -> Vec<FrameId> {
        let Some(lines) = self.line_tables(at) else {
            return vec![function];
        };
        let found = lines.frames(at.vaddr);
        if found.iter().all(|f| f.line.is_none() || f.file.is_none()) {
            return vec![function];
        }
        let outer = self.frame(function).clone();
        let last = found.len() - 1;
        let mut ids = Vec::with_capacity(found.len());
        for (i, f) in found.into_iter().enumerate() {
            let inlined = i < last;
            // The function itself keeps its symbol table name, as without lines.
            let symbol = match f.function {
                Some(name) if inlined => name,
                _ if inlined => "[unknown inlined]".into(),
                _ => outer.symbol.clone(),
            };
            let frame = Frame {
                line: f.line,
                file: f.file,
                inlined,
                ..Frame::named(symbol, outer.module.clone(), FrameKind::Native)
            };
            // Its function's frame exists before its lines' (see `function_frames`).
            self.intern(frame.function());
            ids.push(self.intern(frame));
        }
        ids
    }

    /// The line tables of the file of `at`: its own DWARF, else its separate debug file's
    /// (the one its symbols came from); read once per file.
    fn line_tables(&mut self, at: &InFile) -> Option<Rc<SourceLines>> {
        if let Some(known) = self.line_tables.get(&at.elf) {
            return known.clone();
        }
        if self.lines_until.as_ref().is_some_and(|stop| stop()) {
            self.lines_cut += 1;
            self.line_tables.insert(at.elf, None);
            return None;
        }
        let debug_file = self.sources.iter().find_map(|(path, source)| match source {
            SymbolSource::DebugFile(debug) if path == at.path.as_ref() => Some(debug.clone()),
            _ => None,
        });
        let read = super::lines::read(&at.path, debug_file.as_deref(), &self.debug_dirs);
        let lines = match read {
            Ok(Some(lines)) if self.line_bytes + lines.bytes > DWARF_TOTAL_MAX_BYTES => {
                self.notes.push(format!(
                    "{}: source lines not read: the line tables of this run's files would \
                     take more than {} MiB; its frames are named without lines",
                    at.path.display(),
                    DWARF_TOTAL_MAX_BYTES >> 20
                ));
                None
            }
            Ok(lines) => lines.map(|lines| {
                self.line_bytes += lines.bytes;
                Rc::new(lines)
            }),
            Err(err) => {
                self.notes.push(format!(
                    "{}: source lines not read: {err}; its frames are named without lines",
                    at.path.display()
                ));
                None
            }
        };
        self.line_tables.insert(at.elf, lines.clone());
        lines
    }

    /// [`Symbolizer::native`], and where the address was found when a function symbol of
    /// a file covers it.
    fn native_in_file(
        &mut self,
        pid: u32,
        maps: Option<&ProcMaps>,
        address: u64,
        return_address: bool,
    ) -> (FrameId, Option<InFile>) {
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
                let offset = (lookup - m.start).saturating_add(m.offset);
                let vaddr = elf.as_ref().and_then(|elf| elf.vaddr_of_offset(offset));
                let found = elf.as_ref().zip(vaddr).and_then(|(elf, vaddr)| {
                    Some((Arc::as_ptr(elf) as usize, elf.function_index_at(vaddr)?))
                });
                let Some(key) = found else {
                    let module = file_name(&path);
                    let frame = Frame::unknown_at(&module, vaddr.unwrap_or(offset));
                    if !self.unnamed_files.contains(&module) {
                        self.unnamed_files.insert(module);
                    }
                    return (self.intern(frame), None);
                };
                let at = vaddr.map(|vaddr| InFile {
                    elf: key.0,
                    path: path.clone(),
                    vaddr,
                });
                if let Some(&id) = self.by_function.get(&key) {
                    return (id, at);
                }
                let symbol =
                    elf.map_or_else(String::new, |e| e.functions[key.1].name().to_string());
                let id = self.intern(Frame::named(symbol, file_name(&path), FrameKind::Native));
                self.by_function.insert(key, id);
                (id, at)
            }
            Some((_, pseudo)) => (self.intern(Frame::unknown(&pseudo.to_string_lossy())), None),
            None => {
                let (dir, owners, notes) =
                    (&self.perf_map_dir, &self.perf_map_owners, &mut self.notes);
                let map = self.perf_maps.entry(pid).or_insert_with(|| {
                    let owner = owners.get(&pid)?;
                    let path = dir.join(format!("perf-{pid}.map"));
                    PerfMap::read(&path, *owner).unwrap_or_else(|err| {
                        notes.push(format!(
                            "{}: JIT symbols not read: {err}; its frames show as [unknown]",
                            path.display()
                        ));
                        None
                    })
                });
                let frame = match map.as_ref().and_then(|m| m.find(lookup)) {
                    Some(name) => Frame::named(name.to_string(), "[jit]".into(), FrameKind::Jit),
                    // No map was ever read: the process exited before its first read.
                    None if maps.is_none() => Frame::unknown("[no memory map]"),
                    None => Frame::unknown("[anon]"),
                };
                (self.intern(frame), None)
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
        let id = self.intern(Frame::named(symbol, "[kernel]".into(), FrameKind::Kernel));
        self.by_kernel_symbol.insert(index, id);
        id
    }
}

/// Reads a mapped file's symbols: its own `.symtab` and `.dynsym`; when it has no
/// `.symtab` of its own (stripped), also those of its separate debug file or MiniDebugInfo.
pub fn load_symbols(
    path: &Path,
    debug_dirs: &DebugDirs,
    notes: &mut Vec<String>,
) -> Option<(ElfInfo, SymbolSource)> {
    let mut source = SymbolSource::Own;
    let elf = ElfInfo::symbols_only(path, |file| {
        use object::{Object as _, ObjectSymbol as _};
        let own = file
            .symbols()
            .any(|s| s.kind() == object::SymbolKind::Text && s.is_definition());
        if own {
            return Vec::new();
        }
        let (symbols, found) = debuginfo::extra_symbols(path, file, debug_dirs, notes);
        source = found;
        symbols
    })
    .ok()?;
    Some((elf, source))
}

/// `cg-trace --bench-symbolize N` (for `cargo xtask bench`): names N synthetic samples, each
/// a distinct stack of 8 to 24 addresses inside the functions of cg-trace's own executable and
/// libraries, through the same path as a run's stacks (memory map, ELF symbols, interning),
/// by function only (`--no-lines`) and down to source lines (the default; only files with
/// line tables, or whose debug files have them, cost more). Real profiles repeat stacks and
/// are cheaper: this is the worst case. Returns the lines to print.
pub fn bench(samples: usize) -> Result<String, String> {
    let names = bench_with(samples, false)?;
    let lines = bench_with(samples, true)?;
    Ok(format!("{names}\n  with source lines: {lines}"))
}

fn bench_with(samples: usize, lines: bool) -> Result<String, String> {
    let pid = std::process::id();
    let maps =
        ProcMaps::read(Path::new("/proc"), pid).map_err(|e| format!("/proc/self/maps: {e}"))?;
    let started = std::time::Instant::now();
    let mut symbolizer = Symbolizer::new().with_lines(lines);
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
            .flat_map(|(i, &a)| {
                addresses += 1;
                symbolizer.native_frames(pid, Some(&maps), a, i > 0)
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
         of {} functions{}",
        stack_ids.len(),
        frames,
        targets.len(),
        if lines {
            format!(
                "; {} of {} files with line tables",
                symbolizer
                    .line_tables
                    .values()
                    .filter(|l| l.is_some())
                    .count(),
                symbolizer.line_tables.len()
            )
        } else {
            String::new()
        }
    ))
}

/// For each frame, the frame of its function (see [`Frame::function`]): itself unless it
/// is a source line of a native function, whose frame [`Symbolizer::native_frames`] interns
/// first. Function figures add up over these, so that a function's lines and inlined
/// calls count once in it however many of them a stack holds.
pub fn function_frames(frames: &[Frame]) -> Vec<FrameId> {
    let mut functions: HashMap<Frame, FrameId> = HashMap::new();
    frames
        .iter()
        .enumerate()
        .map(|(i, frame)| {
            let function = frame.function();
            if function == *frame {
                functions.entry(function).or_insert(i as FrameId);
                i as FrameId
            } else {
                functions.get(&function).copied().unwrap_or(i as FrameId)
            }
        })
        .collect()
}

/// `stacks` with each frame replaced by its function's ([`function_frames`]), index for
/// index: what function figures are attributed over. Borrowed when no frame has a line.
pub fn function_stacks<'a>(
    frames: &[Frame],
    stacks: &'a [Vec<FrameId>],
) -> std::borrow::Cow<'a, [Vec<FrameId>]> {
    if frames.iter().all(|f| f.function() == *f) {
        return std::borrow::Cow::Borrowed(stacks);
    }
    let function = function_frames(frames);
    let of = |id: FrameId| function.get(id as usize).copied().unwrap_or(id);
    stacks
        .iter()
        .map(|stack| stack.iter().map(|&id| of(id)).collect())
        .collect()
}

/// The last part of a `/`-separated path (a source file's name in frame labels).
pub fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
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

    fn me() -> ProcessUids {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        ProcessUids {
            euid: uid,
            fsuid: uid,
        }
    }

    #[test]
    fn a_jit_map_is_read_only_when_it_is_a_regular_file_of_the_processs_user() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("perf-1.map");
        std::fs::write(&good, "1000 10 jitted\n").unwrap();
        let map = PerfMap::read(&good, me()).unwrap().unwrap();
        assert_eq!(map.find(0x1005), Some("jitted"));
        assert!(
            PerfMap::read(&dir.path().join("perf-2.map"), me())
                .unwrap()
                .is_none()
        );
        // A link to a file that would pass every other check is still not followed.
        let link = dir.path().join("perf-3.map");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(matches!(
            PerfMap::read(&link, me()),
            Err(PerfMapError::Link)
        ));
        // Another user's file.
        let other = ProcessUids {
            euid: me().euid.wrapping_add(1),
            fsuid: me().euid.wrapping_add(1),
        };
        let err = PerfMap::read(&good, other).unwrap_err();
        assert!(matches!(err, PerfMapError::Owner { .. }), "{err}");
        // A FIFO: refused without blocking on the open.
        let fifo = dir.path().join("perf-4.map");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo of a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(matches!(
            PerfMap::read(&fifo, me()),
            Err(PerfMapError::NotRegular)
        ));
        // Larger than the bound (sparse: no disk used).
        let big = dir.path().join("perf-5.map");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(PERF_MAP_MAX_BYTES + 1)
            .unwrap();
        assert!(matches!(
            PerfMap::read(&big, me()),
            Err(PerfMapError::TooLarge { .. })
        ));
    }

    #[test]
    fn jit_map_lines_are_bounded_and_hostile_values_do_not_overflow() {
        let long = format!("2000 10 {}\n", "x".repeat(PERF_MAP_MAX_LINE));
        let map = PerfMap::parse(&format!("{long}ffffffffffffff00 ffffffffffffffff edge\n"));
        assert_eq!(map.find(0x2005), None);
        assert_eq!(map.find(u64::MAX - 1), Some("edge"));
    }

    #[test]
    fn a_refused_jit_map_is_noted_once_and_an_unknown_owner_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "1000 100 SECRET\n").unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("perf-7.map")).unwrap();
        std::fs::copy(&secret, dir.path().join("perf-8.map")).unwrap();
        let mut symbolizer = Symbolizer::new();
        symbolizer.perf_map_dir = dir.path().to_path_buf();
        symbolizer.set_process_uids(7, me());
        for address in [0x1010, 0x1020] {
            let id = symbolizer.native(7, None, address, false);
            assert_eq!(symbolizer.frame(id).kind, FrameKind::Unknown);
        }
        assert_eq!(symbolizer.notes().len(), 1);
        assert!(symbolizer.notes()[0].contains("symbolic link"));
        // Process 8's owner was never read: its map is not opened.
        let id = symbolizer.native(8, None, 0x1010, false);
        assert_eq!(symbolizer.frame(id).kind, FrameKind::Unknown);
        symbolizer.set_process_uids(9, me());
        std::fs::copy(&secret, dir.path().join("perf-9.map")).unwrap();
        let id = symbolizer.native(9, None, 0x1010, false);
        assert_eq!(symbolizer.frame(id).symbol, "SECRET");
    }

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
    fn lines_and_inlined_calls_count_once_in_their_function() {
        let native = |symbol: &str| Frame::named(symbol.into(), "app".into(), FrameKind::Native);
        let at = |symbol: &str, line, inlined| Frame {
            line: Some(line),
            file: Some("/src/app.c".into()),
            inlined,
            ..native(symbol)
        };
        // Frames as `native_frames` interns them: each function before its lines.
        let frames = vec![
            native("main"),        // 0
            at("main", 10, false), // 1
            native("work"),        // 2
            at("work", 20, false), // 3
            native("step"),        // 4
            at("step", 5, true),   // 5: step inlined into work
            at("work", 21, false), // 6
        ];
        assert_eq!(function_frames(&frames), [0, 0, 2, 2, 4, 4, 2]);
        assert_eq!(frames[5].label(), "step (app.c:5) (inlined)");
        assert_eq!(frames[3].label(), "work (app.c:20)");
        // main:10 -> work:20 -> step:5 (inlined), and work at two lines of one stack (recursion).
        let stacks = vec![vec![1, 3, 5], vec![1, 3, 6]];
        let by_function = function_stacks(&frames, &stacks);
        assert_eq!(by_function.as_ref(), [vec![0, 2, 4], vec![0, 2, 2]]);
        // Without lines the stacks are the function stacks already.
        let plain = vec![vec![0, 1]];
        assert!(matches!(
            function_stacks(&[native("main"), native("work")], &plain),
            std::borrow::Cow::Borrowed(_)
        ));
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

    /// Naming after a run gives way to a stop signal: once `lines_until` says so, no file's
    /// line tables are read (this test binary has them: it is built with debug information).
    #[test]
    fn a_stop_while_naming_leaves_lines_unread_and_says_so() {
        #[inline(never)]
        fn marker() -> u64 {
            std::hint::black_box(7)
        }
        let maps = ProcMaps::read(Path::new("/proc"), std::process::id()).unwrap();
        let pc = marker as *const () as u64;
        let line_of = |symbolizer: &mut Symbolizer| {
            let ids = symbolizer.native_frames(std::process::id(), Some(&maps), pc, false);
            symbolizer.frame(*ids.last().unwrap()).line
        };
        let mut told = Symbolizer::new().with_lines(true).lines_until(|| false);
        assert!(
            line_of(&mut told).is_some(),
            "this test binary has line tables"
        );
        assert!(told.notes().iter().all(|n| !n.contains("stop signal")));
        let mut stopped = Symbolizer::new().with_lines(true).lines_until(|| true);
        assert_eq!(line_of(&mut stopped), None);
        let id = stopped.native(std::process::id(), Some(&maps), pc, false);
        assert!(stopped.frame(id).symbol.ends_with("marker"));
        let notes = stopped.notes();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("source lines not read for 1 file(s): a stop signal")),
            "{notes:?}"
        );
    }

    #[test]
    fn an_address_in_a_file_but_in_no_function_says_the_file_and_address() {
        static DATA: [u64; 4] = [1, 2, 3, 4];
        let address = std::hint::black_box(&DATA) as *const _ as u64;
        let maps = ProcMaps::read(Path::new("/proc"), std::process::id()).unwrap();
        let mapping = maps.find(address).unwrap();
        let exe = mapping.path.clone().unwrap();
        let elf = ElfInfo::open(&exe).unwrap();
        let vaddr = elf
            .vaddr_of_offset(address - mapping.start + mapping.offset)
            .unwrap();
        let mut symbolizer = Symbolizer::new();
        let id = symbolizer.native(std::process::id(), Some(&maps), address, false);
        let frame = symbolizer.frame(id);
        assert_eq!(frame.kind, FrameKind::Unknown);
        let expected = format!("{}+{vaddr:#x}", file_name(&exe));
        assert_eq!(frame.symbol, expected);
        assert_eq!(frame.label(), expected);
        assert_eq!(frame.module, file_name(&exe));
    }
}
