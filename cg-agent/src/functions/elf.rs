//! Reads what function-level profiling needs from an ELF file: its function symbols
//! (`.symtab` and `.dynsym`, demangled Rust and C++ names), its loadable segments (to turn
//! addresses into file offsets and back), its dynamic dependencies (`DT_NEEDED`, `RUNPATH`),
//! and a few bytes at a symbol (a function's first instruction, a constant's value); and
//! the one rule for a section's bytes ([`section_bytes`]: bounded, zlib-compressed debug
//! sections decompressed under that bound).
//!
//! The file is read once and only what is needed is kept.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use object::{
    Endianness, Object as _, ObjectSymbol as _, ReadCache, ReadRef, StringTable, SymbolKind,
    elf::{
        DT_NEEDED, DT_RPATH, DT_RUNPATH, ET_DYN, PF_X, PT_LOAD, SHN_LORESERVE, SHN_UNDEF,
        SHN_XINDEX, SHT_DYNSYM, SHT_SYMTAB, STT_FUNC, STT_GNU_IFUNC, Sym64,
    },
    read::elf::{
        Dyn as _, ElfFile64, FileHeader as _, ProgramHeader as _, SectionHeader as _, Sym as _,
    },
};

use super::FunctionError;

/// A function symbol.
#[derive(Clone, Debug)]
pub struct Symbol {
    /// Virtual address in the file's own address space.
    pub address: u64,
    /// Size in bytes (0 when the symbol table does not say).
    pub size: u64,
    /// The end of the section that holds it (of its segment when the file has no section
    /// headers): a symbol whose size is 0 covers addresses up to the next symbol, never past
    /// this.
    pub limit: u64,
    /// The name as stored (mangled).
    pub raw: Box<str>,
    /// An `STT_GNU_IFUNC` symbol: it names the resolver that picks an implementation when
    /// the program is loaded (as perf names that code), not the function callers of its
    /// name run, so it is never probed by name.
    pub resolver: bool,
    /// [`Symbol::name`], once asked for: demangling every symbol of a large library
    /// (librustc_driver has ~200,000) took half of naming a whole machine's stacks, and
    /// stacks name only the few functions they were sampled in.
    demangled: OnceLock<Box<str>>,
}

impl Symbol {
    pub fn new(address: u64, size: u64, limit: u64, raw: &str) -> Self {
        Symbol {
            address,
            size,
            limit,
            raw: raw.into(),
            resolver: false,
            demangled: OnceLock::new(),
        }
    }

    /// Demangled, without Rust hashes or C++ parameter lists; `raw` when not mangled.
    pub fn name(&self) -> &str {
        self.demangled.get_or_init(|| demangle(&self.raw).into())
    }
}

/// Two symbols are the same when their address, extent and stored name are (the demangled
/// name follows from the stored one).
impl PartialEq for Symbol {
    fn eq(&self, other: &Self) -> bool {
        (
            self.address,
            self.size,
            self.limit,
            &self.raw,
            self.resolver,
        ) == (
            other.address,
            other.size,
            other.limit,
            &other.raw,
            other.resolver,
        )
    }
}

impl Eq for Symbol {}

/// Whether [`ElfInfo`] reads each function's first bytes ([`ElfInfo::prologues`]).
#[derive(Clone, Copy)]
enum Code {
    Prologues,
    None,
}

/// The file's function symbols (`.symtab` and `.dynsym`, [`table_symbols`]; a table that
/// cannot be read gives none), a symbol whose section ends nowhere past it bounded by its
/// segment.
fn functions_of<'data, R: ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
    segments: &[Segment],
) -> Vec<Symbol> {
    let limit = |address| segment_end(segments, address);
    let ends = section_ends(file.elf_section_table(), file.endian());
    [SHT_SYMTAB, SHT_DYNSYM]
        .into_iter()
        .flat_map(|sh_type| {
            symbols_of_table(file, sh_type, &ends, limit).unwrap_or_else(|err| {
                tracing::debug!("a symbol table not read: {err}");
                Vec::new()
            })
        })
        .collect()
}

/// The data symbols named in `data_symbols`, with up to 16 bytes of their value.
fn data_symbols_of<'data, R: ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
    segments: &[Segment],
    data_symbols: &[&str],
) -> DataSymbols {
    let mut data: DataSymbols = Vec::new();
    if data_symbols.is_empty() {
        return data;
    }
    for symbol in file.symbols().chain(file.dynamic_symbols()) {
        let Ok(raw) = symbol.name() else { continue };
        if !symbol.is_definition()
            || symbol.kind() != SymbolKind::Data
            || !data_symbols.contains(&raw)
            || data.iter().any(|(n, _, _)| n == raw)
        {
            continue;
        }
        let value = bytes_at(
            file.data(),
            segments,
            symbol.address(),
            16.min(symbol.size()),
        )
        .unwrap_or_default();
        data.push((raw.to_string(), symbol.address(), value));
    }
    data
}

/// The most bytes of one symbol table, or of its string table, read.
pub const SYMTAB_MAX_BYTES: u64 = 512 << 20;

/// Why a symbol table was not read.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("its symbol table is larger than {} MiB", SYMTAB_MAX_BYTES >> 20)]
    TooLarge,
    #[error("{0}")]
    Malformed(String),
}

/// The function symbols of a file's symbol table of type `sh_type` (`SHT_SYMTAB`,
/// `SHT_DYNSYM`), reading only that table and its strings, each at most
/// [`SYMTAB_MAX_BYTES`] (one read each, also from a [`ReadCache`]); none without one. See
/// [`function_symbols`]; `fallback_limit` bounds a symbol whose section ends nowhere past it.
pub fn table_symbols<'data, R: ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
    sh_type: u32,
    fallback_limit: impl Fn(u64) -> u64,
) -> Result<Vec<Symbol>, TableError> {
    let ends = section_ends(file.elf_section_table(), file.endian());
    symbols_of_table(file, sh_type, &ends, fallback_limit)
}

/// [`table_symbols`] with the file's [`section_ends`] already read.
fn symbols_of_table<'data, R: ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
    sh_type: u32,
    section_ends: &[u64],
    fallback_limit: impl Fn(u64) -> u64,
) -> Result<Vec<Symbol>, TableError> {
    let endian = file.endian();
    let sections = file.elf_section_table();
    let Some(table) = sections.iter().find(|s| s.sh_type(endian) == sh_type) else {
        return Ok(Vec::new());
    };
    let strings = sections
        .section(object::SectionIndex(table.sh_link(endian) as usize))
        .map_err(|e| TableError::Malformed(e.to_string()))?;
    if table.sh_size(endian) > SYMTAB_MAX_BYTES || strings.sh_size(endian) > SYMTAB_MAX_BYTES {
        return Err(TableError::TooLarge);
    }
    let malformed = |what: &str, e: object::Error| TableError::Malformed(format!("{what}: {e}"));
    let table = table
        .data(endian, file.data())
        .map_err(|e| malformed("symbol table", e))?;
    let strings = strings
        .data(endian, file.data())
        .map_err(|e| malformed("string table", e))?;
    Ok(function_symbols(
        endian,
        table,
        strings,
        section_ends,
        fallback_limit,
    ))
}

/// The function symbols of a symbol table (`table`, raw `Elf64_Sym` entries) whose names
/// are in `strings`: the one rule of what names code. An `STT_FUNC` or `STT_GNU_IFUNC`
/// ([`Symbol::resolver`]) symbol defined in a section of the file (not undefined, not
/// absolute) at an address code can be at (not 0, not the last), with a name, as perf
/// takes them. Its limit is the end of its
/// section (`section_ends`, by section index), else `fallback_limit(address)`, and always
/// past its address. Entries that do not parse are skipped.
pub fn function_symbols(
    endian: Endianness,
    table: &[u8],
    strings: &[u8],
    section_ends: &[u64],
    fallback_limit: impl Fn(u64) -> u64,
) -> Vec<Symbol> {
    let count = table.len() / std::mem::size_of::<Sym64<Endianness>>();
    let Ok((symbols, _)) = object::pod::slice_from_bytes::<Sym64<Endianness>>(table, count) else {
        return Vec::new();
    };
    let strings = StringTable::new(strings, 0, strings.len() as u64);
    symbols
        .iter()
        .filter_map(|sym| {
            let address = sym.st_value(endian);
            let section = sym.st_shndx(endian);
            let in_a_section =
                section != SHN_UNDEF && (section < SHN_LORESERVE || section == SHN_XINDEX);
            // Nothing can run at 0 or at the very last address (no byte of code fits past it).
            let kind = sym.st_type();
            let code = kind == STT_FUNC || kind == STT_GNU_IFUNC;
            if !code || !in_a_section || address == 0 || address == u64::MAX {
                return None;
            }
            let raw = std::str::from_utf8(sym.name(endian, strings).ok()?).ok()?;
            if raw.is_empty() {
                return None;
            }
            let limit = section_ends
                .get(usize::from(section))
                .copied()
                .filter(|&end| end > address)
                .unwrap_or_else(|| fallback_limit(address))
                .max(address + 1);
            Some(Symbol {
                resolver: kind == STT_GNU_IFUNC,
                ..Symbol::new(address, sym.st_size(endian), limit, raw)
            })
        })
        .collect()
}

/// Data symbols: name, address, up to 16 bytes of the initial value.
type DataSymbols = Vec<(String, u64, Vec<u8>)>;

/// Up to `len` bytes of the file `data` at virtual address `vaddr`.
fn bytes_at<'data, R: ReadRef<'data>>(
    data: R,
    segments: &[Segment],
    vaddr: u64,
    len: u64,
) -> Option<Vec<u8>> {
    let range = file_range(segments, vaddr, len)?;
    data.read_bytes_at(range.start as u64, range.len() as u64)
        .ok()
        .map(<[u8]>::to_vec)
}

/// The first 16 bytes of each function (zeros past what the file holds).
fn prologues_of<'data, R: ReadRef<'data>>(
    data: R,
    segments: &[Segment],
    functions: &[Symbol],
) -> Vec<[u8; 16]> {
    functions
        .iter()
        .map(|f| {
            let mut out = [0u8; 16];
            if let Some(code) = bytes_at(data, segments, f.address, 16) {
                out[..code.len()].copy_from_slice(&code);
            }
            out
        })
        .collect()
}

/// The file's `DT_NEEDED` entries and its `DT_RUNPATH`/`DT_RPATH` folders, `$ORIGIN`
/// expanded to the folder of `path`.
fn dependencies<'data, R: ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
    path: &Path,
) -> (Vec<String>, Vec<PathBuf>) {
    let (mut needed, mut runpath) = (Vec::new(), Vec::new());
    let endian = file.endian();
    let sections = file.elf_section_table();
    let Ok(Some((dynamic, link))) = sections.dynamic(endian, file.data()) else {
        return (needed, runpath);
    };
    let Ok(strings) = sections.strings(endian, file.data(), link) else {
        return (needed, runpath);
    };
    let origin = path.parent().unwrap_or(Path::new("/")).to_string_lossy();
    for entry in dynamic {
        let tag = entry.tag(endian);
        let is = |t: i64| tag == t;
        if !is(DT_NEEDED) && !is(DT_RUNPATH) && !is(DT_RPATH) {
            continue;
        }
        let Ok(value) = entry.string(endian, strings) else {
            continue;
        };
        let value = String::from_utf8_lossy(value).into_owned();
        if is(DT_NEEDED) {
            needed.push(value);
        } else {
            runpath.extend(value.split(':').filter(|p| !p.is_empty()).map(|p| {
                PathBuf::from(p.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin))
            }));
        }
    }
    (needed, runpath)
}

/// A loadable segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
    pub executable: bool,
}

/// The parts of an ELF file cg-trace uses.
#[derive(Clone, Debug)]
pub struct ElfInfo {
    pub path: PathBuf,
    /// Position-independent (a shared library or PIE): loaded at a bias.
    pub relocatable: bool,
    /// `e_machine` (`EM_X86_64`, ...).
    pub machine: u16,
    /// `e_entry`: the program's entry point (0 when it has none).
    pub entry: u64,
    pub segments: Vec<Segment>,
    /// Function symbols sorted by address, one per (address, name).
    pub functions: Vec<Symbol>,
    /// Data symbols a caller asked for by name (see [`ElfInfo::open_with`]): name, address,
    /// and up to 16 bytes of their initial value.
    pub data: Vec<(String, u64, Vec<u8>)>,
    pub needed: Vec<String>,
    /// `DT_RUNPATH` or `DT_RPATH` entries, `$ORIGIN` expanded.
    pub runpath: Vec<PathBuf>,
    /// The first 16 bytes of each function, by index in `functions` (for probe costs).
    pub prologues: Vec<[u8; 16]>,
}

/// The largest ELF file read.
pub const ELF_MAX_BYTES: u64 = 1 << 30;

/// Reads a whole ELF file (opened by [`open_regular`]'s rules).
pub fn read_file(path: &Path) -> Result<Vec<u8>, FunctionError> {
    use std::io::Read as _;
    let file = open_regular(path)?;
    let len = file.metadata().map_err(|e| elf_error(path, e))?.len();
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(ELF_MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| elf_error(path, e))?;
    Ok(bytes)
}

/// Why a section's bytes were not taken.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SectionError {
    #[error("larger than {} MiB", .0 >> 20)]
    TooLarge(u64),
    #[error("compressed in a format other than zlib")]
    Compression,
    #[error("{0}")]
    Malformed(String),
}

/// A section's bytes, decompressed when the file compressed it (`-gz`, as Debian's `-dbgsym`
/// packages do with debug sections): at most `max` bytes once decompressed, checked before
/// anything is decompressed (the size a compressed section claims is outside data too: the
/// output stops there). zlib only (what `-gz` and `objcopy --compress-debug-sections`
/// write); zstd is refused.
pub fn section_bytes<'data>(
    section: &impl object::ObjectSection<'data>,
    max: u64,
) -> Result<std::borrow::Cow<'data, [u8]>, SectionError> {
    use std::io::Read as _;
    let malformed = |e: object::Error| SectionError::Malformed(e.to_string());
    let compressed = section.compressed_data().map_err(malformed)?;
    if compressed.uncompressed_size > max {
        return Err(SectionError::TooLarge(max));
    }
    match compressed.format {
        object::CompressionFormat::None => Ok(std::borrow::Cow::Borrowed(compressed.data)),
        object::CompressionFormat::Zlib => {
            let size = compressed.uncompressed_size;
            let mut out = Vec::with_capacity(size as usize);
            flate2::read::ZlibDecoder::new(compressed.data)
                .take(size)
                .read_to_end(&mut out)
                .map_err(|e| SectionError::Malformed(e.to_string()))?;
            Ok(std::borrow::Cow::Owned(out))
        }
        _ => Err(SectionError::Compression),
    }
}

/// Why a file from outside was not opened ([`open_outside`]).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a regular file")]
    NotRegular,
    #[error("larger than {} MiB", ELF_MAX_BYTES >> 20)]
    TooLarge,
}

/// Opens a file from outside (a mapped file, a debug file) to read it, or parts of it
/// through [`object::read::ReadCache`]: the one rule for them all. Only a regular file
/// (opened without blocking, so a FIFO put in its place does not hang us; links are followed,
/// as build-id entries are links into the debug tree) of at most [`ELF_MAX_BYTES`], so that no
/// section claimed in it asks for more.
pub fn open_outside(path: &Path) -> Result<fs::File, OpenError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(OpenError::NotRegular);
    }
    if meta.len() > ELF_MAX_BYTES {
        return Err(OpenError::TooLarge);
    }
    Ok(file)
}

/// [`open_outside`], its refusal said as a [`FunctionError`] naming the file.
pub fn open_regular(path: &Path) -> Result<fs::File, FunctionError> {
    open_outside(path).map_err(|e| elf_error(path, e))
}

fn elf_error(path: &Path, what: impl std::fmt::Display) -> FunctionError {
    FunctionError::Elf {
        path: path.to_path_buf(),
        reason: what.to_string(),
    }
}

impl ElfInfo {
    /// Reads `path`'s functions, segments and dependencies.
    pub fn open(path: &Path) -> Result<Self, FunctionError> {
        Self::open_with(path, &[])
    }

    /// Like [`ElfInfo::open`], also looking up the data symbols named in `data_symbols`.
    pub fn open_with(path: &Path, data_symbols: &[&str]) -> Result<Self, FunctionError> {
        let bytes = read_file(path)?;
        Self::parse(path, &bytes, data_symbols)
    }

    /// Parses an ELF image already in memory.
    pub fn parse(path: &Path, bytes: &[u8], data_symbols: &[&str]) -> Result<Self, FunctionError> {
        if bytes.get(..4) != Some(b"\x7fELF") {
            return Err(elf_error(path, "not an ELF file"));
        }
        let file = ElfFile64::<Endianness>::parse(bytes)
            .map_err(|e| elf_error(path, format!("not a 64-bit ELF file we can read ({e})")))?;
        Ok(Self::of(path, &file, data_symbols, Code::Prologues, |_| {
            Vec::new()
        }))
    }

    /// The functions, segments and dependencies of the file at `path`, reading only its
    /// headers, symbol tables and dynamic section (what naming stacks needs: a library's
    /// file is mostly code), with the function symbols `extra` finds elsewhere; without the
    /// functions' first bytes ([`ElfInfo::prologues`] is empty).
    pub fn symbols_only(
        path: &Path,
        extra: impl for<'a> FnOnce(&ElfFile64<'a, Endianness, &'a ReadCache<fs::File>>) -> Vec<Symbol>,
    ) -> Result<Self, FunctionError> {
        let cache = ReadCache::new(open_regular(path)?);
        let file = ElfFile64::<Endianness, _>::parse(&cache)
            .map_err(|e| elf_error(path, format!("not a 64-bit ELF file we can read ({e})")))?;
        Ok(Self::of(path, &file, &[], Code::None, extra))
    }

    fn of<'data, R: ReadRef<'data>>(
        path: &Path,
        file: &ElfFile64<'data, Endianness, R>,
        data_symbols: &[&str],
        code: Code,
        extra: impl FnOnce(&ElfFile64<'data, Endianness, R>) -> Vec<Symbol>,
    ) -> Self {
        let endian = file.endian();
        let header = file.elf_header();
        let segments = load_segments(file);
        let mut functions = functions_of(file, &segments);
        let data = data_symbols_of(file, &segments, data_symbols);
        functions.extend(extra(file));
        sort_functions(&mut functions);
        let prologues = match code {
            Code::Prologues => prologues_of(file.data(), &segments, &functions),
            Code::None => Vec::new(),
        };
        let (needed, runpath) = dependencies(file, path);
        ElfInfo {
            path: path.to_path_buf(),
            relocatable: header.e_type(endian) == ET_DYN,
            machine: header.e_machine(endian),
            entry: header.e_entry(endian),
            segments,
            functions,
            data,
            needed,
            runpath,
            prologues,
        }
    }

    /// The file offset of virtual address `vaddr` (what uprobes attach to).
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz.max(1))
            .and_then(|s| (vaddr - s.vaddr).checked_add(s.offset))
    }

    /// The virtual address of file offset `offset` (from `/proc/PID/maps`), in an
    /// executable segment first.
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        vaddr_of_offset(&self.segments, offset)
    }

    /// The function containing `vaddr`: the closest symbol at or below it, within its size
    /// (or before the next symbol when the size is unknown).
    pub fn function_at(&self, vaddr: u64) -> Option<&Symbol> {
        self.function_index_at(vaddr).map(|i| &self.functions[i])
    }

    /// The index in `functions` of the function containing `vaddr` (see
    /// [`ElfInfo::function_at`]).
    pub fn function_index_at(&self, vaddr: u64) -> Option<usize> {
        let index = self.functions.partition_point(|f| f.address <= vaddr);
        let candidate = self.functions.get(index.checked_sub(1)?)?;
        let start = candidate.address;
        let first = self.functions[..index].partition_point(|f| f.address < start);
        let aliases = &self.functions[first..index];
        if aliases.iter().any(|f| f.size > 0) {
            // Several symbols may start at one address (aliases): the preferred one (first
            // in order) whose size covers the address.
            return aliases
                .iter()
                .position(|f| vaddr - f.address < f.size.max(1))
                .map(|i| first + i);
        }
        // Only symbols without a size here: up to the next symbol, within their section
        // (the last one of a file, `_fini` say, does not claim the data after it).
        let next = self.functions.get(index).map_or(u64::MAX, |f| f.address);
        let limit = aliases.iter().map(|f| f.limit).max().unwrap_or(start);
        (vaddr < next.min(limit.max(start.saturating_add(1)))).then_some(first)
    }

    /// Whether the file has a symbol table of its own (`.symtab` with functions), beyond
    /// the dynamic symbols every shared object exports.
    pub fn has_symtab(bytes: &[u8]) -> bool {
        ElfFile64::<Endianness>::parse(bytes).is_ok_and(|file| {
            file.symbols()
                .any(|s| s.kind() == SymbolKind::Text && s.is_definition())
        })
    }

    /// Up to `len` bytes of the file image `image` (as read for [`ElfInfo::parse`]) at virtual
    /// address `vaddr`, within one segment; `None` when the address is not in the file.
    pub fn code<'a>(&self, image: &'a [u8], vaddr: u64, len: u64) -> Option<&'a [u8]> {
        image.get(file_range(&self.segments, vaddr, len)?)
    }

    /// A data symbol's address and initial bytes, when asked for at open.
    pub fn data_symbol(&self, name: &str) -> Option<(u64, &[u8])> {
        self.data
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, address, value)| (*address, value.as_slice()))
    }
}

/// The loadable segments (`PT_LOAD`) of a parsed file.
pub fn load_segments<'data, R: object::ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
) -> Vec<Segment> {
    let endian = file.endian();
    file.elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == PT_LOAD)
        .map(|ph| Segment {
            vaddr: ph.p_vaddr(endian),
            memsz: ph.p_memsz(endian),
            offset: ph.p_offset(endian),
            filesz: ph.p_filesz(endian),
            executable: ph.p_flags(endian) & PF_X != 0,
        })
        .collect()
}

/// The virtual address of file offset `offset` (from `/proc/PID/maps`), in an executable
/// segment first.
pub fn vaddr_of_offset(segments: &[Segment], offset: u64) -> Option<u64> {
    let within = |s: &&Segment| offset >= s.offset && offset - s.offset < s.filesz;
    segments
        .iter()
        .filter(|s| s.executable)
        .find(within)
        .or_else(|| segments.iter().find(within))
        .and_then(|s| (offset - s.offset).checked_add(s.vaddr))
}

/// At one address, the name people use first: compiler-made aliases (`f.localalias`,
/// `f.part.0`, `f.cold`) and longer names after; one symbol per (address, name).
pub fn sort_functions(functions: &mut Vec<Symbol>) {
    functions.sort_by(|a, b| {
        a.address
            .cmp(&b.address)
            .then_with(|| a.raw.contains('.').cmp(&b.raw.contains('.')))
            .then_with(|| a.raw.len().cmp(&b.raw.len()))
            .then_with(|| a.raw.cmp(&b.raw))
    });
    functions.dedup_by(|a, b| a.address == b.address && a.raw == b.raw);
}

/// The end address of each section, by section index (0 for sections not loaded).
pub fn section_ends<'data, R: object::ReadRef<'data>>(
    sections: &object::read::elf::SectionTable<'data, object::elf::FileHeader64<Endianness>, R>,
    endian: Endianness,
) -> Vec<u64> {
    use object::read::elf::SectionHeader as _;
    sections
        .iter()
        .map(|s| {
            if s.sh_flags(endian) & u64::from(object::elf::SHF_ALLOC) == 0 {
                0
            } else {
                s.sh_addr(endian).saturating_add(s.sh_size(endian))
            }
        })
        .collect()
}

/// The end of the loadable segment holding `vaddr` (`vaddr + 1` when none does).
pub fn segment_end(segments: &[Segment], vaddr: u64) -> u64 {
    segments
        .iter()
        .find(|s| vaddr >= s.vaddr && vaddr < s.vaddr.saturating_add(s.memsz))
        .map_or(vaddr.saturating_add(1), |s| s.vaddr.saturating_add(s.memsz))
}

/// The byte range of the file that holds `len` bytes at virtual address `vaddr` (fewer
/// where the segment ends first).
fn file_range(segments: &[Segment], vaddr: u64, len: u64) -> Option<std::ops::Range<usize>> {
    let segment = segments
        .iter()
        .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)?;
    let inside = vaddr - segment.vaddr;
    let start = usize::try_from(inside.checked_add(segment.offset)?).ok()?;
    let len = usize::try_from(len.min(segment.filesz - inside)).ok()?;
    Some(start..start.checked_add(len)?)
}

/// A symbol name as people write it: Rust without the hash, C++ without parameters.
pub fn demangle(raw: &str) -> String {
    if let Ok(symbol) = rustc_demangle::try_demangle(raw) {
        return format!("{symbol:#}");
    }
    if raw.starts_with("_Z")
        && let Ok(symbol) = cpp_demangle::Symbol::new(raw)
    {
        let options = cpp_demangle::DemangleOptions::new()
            .no_params()
            .no_return_type();
        if let Ok(text) = symbol.demangle_with_options(&options) {
            return text;
        }
    }
    raw.to_string()
}

/// How the kernel runs a uprobe's displaced first instruction: emulated (cheap) or
/// single-stepped out of line (an extra trap, about ten times the cost here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstInstruction {
    /// `push` of a register or `nop`: emulated by the kernel (x86-64, Linux 6.9 and later).
    Emulated,
    /// Anything else (`endbr64`, `mov`, `sub`, ...): single-stepped.
    SingleStepped,
}

impl FirstInstruction {
    /// Classifies x86-64 machine code by its first instruction.
    pub fn of_x86_64(code: &[u8]) -> Self {
        match code {
            // push %rax..%rdi, nop
            [0x50..=0x57, ..] | [0x90, ..] => FirstInstruction::Emulated,
            // push %r8..%r15
            [0x41, 0x50..=0x57, ..] => FirstInstruction::Emulated,
            // multi-byte nops: 0f 1f /0, and 66-prefixed forms
            [0x0f, 0x1f, ..] | [0x66, 0x0f, 0x1f, ..] | [0x66, 0x90, ..] => {
                FirstInstruction::Emulated
            }
            _ => FirstInstruction::SingleStepped,
        }
    }

    /// Estimated cost of one entry + return probe pair in microseconds, as measured on the
    /// development VM (`cargo xtask bench --functions` measures it on yours).
    pub fn estimated_pair_cost_us(self) -> f64 {
        match self {
            FirstInstruction::Emulated => 2.0,
            FirstInstruction::SingleStepped => 13.0,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            FirstInstruction::Emulated => "emulated",
            FirstInstruction::SingleStepped => "single-stepped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_taken_only_within_its_bound() {
        let bytes = read_file(Path::new("/proc/self/exe")).unwrap();
        let file = object::File::parse(bytes.as_slice()).unwrap();
        let text = file.section_by_name(".text").unwrap();
        use object::ObjectSection as _;
        let size = text.size();
        assert_eq!(section_bytes(&text, size).unwrap().len() as u64, size);
        assert_eq!(
            section_bytes(&text, size - 1),
            Err(SectionError::TooLarge(size - 1))
        );
    }

    /// Found by the `elf_symbols` fuzz target: a segment whose end passes 2^64 made every
    /// address lookup overflow.
    #[test]
    fn segments_that_run_past_the_address_space_are_looked_up_without_overflow() {
        let bytes =
            include_bytes!("../../../fuzz/regressions/elf_symbols/segment-end-past-u64-max");
        let elf = ElfInfo::parse(Path::new("fuzzed"), bytes, &["_PyRuntime"]).unwrap();
        let segment = elf.segments[0];
        assert!(segment.vaddr.checked_add(segment.filesz).is_none());
        assert_eq!(elf.file_offset(segment.vaddr), Some(segment.offset));
        assert_eq!(elf.vaddr_of_offset(segment.offset), Some(segment.vaddr));
        // The last address is inside the segment, but its file offset would pass 2^64; the
        // last file offset is inside too, and its address fits.
        assert_eq!(elf.file_offset(u64::MAX), None);
        assert_eq!(
            elf.vaddr_of_offset(u64::MAX),
            Some(u64::MAX - segment.offset + segment.vaddr)
        );
        for f in &elf.functions {
            assert_eq!(
                elf.function_at(f.address).map(|g| g.address),
                Some(f.address)
            );
            let _ = elf.file_offset(f.address);
        }
    }

    #[test]
    fn demangles_rust_and_cpp_names_without_hashes_or_parameters() {
        assert_eq!(
            demangle("_ZN8cg_funcs8workload5heavy17h0123456789abcdefE"),
            "cg_funcs::workload::heavy"
        );
        assert_eq!(demangle("_ZN2ns5Klass6methodEi"), "ns::Klass::method");
        assert_eq!(demangle("deflate"), "deflate");
    }

    #[test]
    fn classifies_first_instructions() {
        assert_eq!(
            FirstInstruction::of_x86_64(&[0x55, 0x48, 0x89, 0xe5]),
            FirstInstruction::Emulated
        );
        assert_eq!(
            FirstInstruction::of_x86_64(&[0x41, 0x57]),
            FirstInstruction::Emulated
        );
        assert_eq!(
            FirstInstruction::of_x86_64(&[0xf3, 0x0f, 0x1e, 0xfa]),
            FirstInstruction::SingleStepped
        );
        assert_eq!(
            FirstInstruction::of_x86_64(&[0x48, 0x83, 0xec, 0x18]),
            FirstInstruction::SingleStepped
        );
    }

    /// Found by the `debug_info` fuzz target: a function symbol at the last address had a
    /// bound that did not lie past it.
    #[test]
    fn a_symbol_at_the_top_of_the_address_space_is_no_function() {
        let bytes = include_bytes!(
            "../../../fuzz/regressions/debug_info/symbol-at-the-top-of-the-address-space"
        );
        let symbols = function_symbols(Endianness::Little, bytes, bytes, &[], |a| a + 1);
        assert!(symbols.iter().all(|s| s.limit > s.address), "{symbols:?}");
        assert!(symbols.iter().all(|s| s.address != u64::MAX));
    }

    /// What names code: functions and IFUNC resolvers defined in a section; nothing
    /// absolute, undefined or of another kind.
    #[test]
    fn functions_and_resolvers_defined_in_a_section_name_code() {
        // (st_info type, st_shndx) of four entries named "f", each at 0x1000.
        let entries = [
            (STT_FUNC, 1u16),
            (STT_GNU_IFUNC, 1),
            (STT_FUNC, object::elf::SHN_ABS),
            (STT_FUNC, SHN_UNDEF),
            (object::elf::STT_OBJECT, 1),
        ];
        let mut table = vec![0u8; 24 * entries.len()];
        for (chunk, (kind, section)) in table.chunks_mut(24).zip(entries) {
            chunk[0..4].copy_from_slice(&1u32.to_le_bytes()); // st_name
            chunk[4] = kind; // st_info
            chunk[6..8].copy_from_slice(&section.to_le_bytes()); // st_shndx
            chunk[8..16].copy_from_slice(&0x1000u64.to_le_bytes()); // st_value
        }
        let symbols = function_symbols(Endianness::Little, &table, b"\0f\0", &[0, 0x2000], |a| {
            a + 1
        });
        let found: Vec<(bool, u64)> = symbols.iter().map(|s| (s.resolver, s.limit)).collect();
        assert_eq!(found, [(false, 0x2000), (true, 0x2000)]);
    }

    #[test]
    fn malformed_symbol_tables_give_what_parses_and_never_panic() {
        // A table that is not a whole number of entries, names past the string table.
        let mut table = vec![0u8; 24 * 3 + 5];
        for (i, chunk) in table.chunks_mut(24).enumerate().take(3) {
            chunk[0..4].copy_from_slice(&(u32::MAX - i as u32).to_le_bytes()); // st_name
            chunk[4] = STT_FUNC; // st_info
            chunk[6..8].copy_from_slice(&1u16.to_le_bytes()); // st_shndx
            chunk[8..16].copy_from_slice(&0x1000u64.to_le_bytes()); // st_value
        }
        assert!(function_symbols(Endianness::Little, &table, b"\0f\0", &[], |a| a + 1).is_empty());
        // The same entries with a real name.
        for chunk in table.chunks_mut(24).take(3) {
            chunk[0..4].copy_from_slice(&1u32.to_le_bytes());
        }
        let symbols = function_symbols(Endianness::Little, &table, b"\0f\0", &[0, 0x2000], |a| {
            a + 1
        });
        assert_eq!(symbols.len(), 3);
        assert_eq!(symbols[0].limit, 0x2000);
        assert!(function_symbols(Endianness::Little, &table, b"", &[], |a| a + 1).is_empty());
        assert!(function_symbols(Endianness::Little, &[], b"", &[], |a| a + 1).is_empty());
    }

    fn symbol(name: &str, address: u64, size: u64, limit: u64) -> Symbol {
        Symbol::new(address, size, limit, name)
    }

    fn with_functions(functions: Vec<Symbol>) -> ElfInfo {
        ElfInfo {
            path: PathBuf::from("/x"),
            relocatable: true,
            machine: 0,
            entry: 0,
            segments: Vec::new(),
            prologues: vec![[0; 16]; functions.len()],
            functions,
            data: Vec::new(),
            needed: Vec::new(),
            runpath: Vec::new(),
        }
    }

    #[test]
    fn a_zero_size_symbol_claims_nothing_past_its_section() {
        // .text 0x1000-0x1f00 with `main` (sized) and `asm_loop` (no size), .fini
        // 0x1f00-0x1f0d with `_fini` (no size, the file's last function symbol), data after.
        let elf = with_functions(vec![
            symbol("main", 0x1000, 0x40, 0x1f00),
            symbol("asm_loop", 0x1800, 0, 0x1f00),
            symbol("_fini", 0x1f00, 0, 0x1f0d),
        ]);
        let at = |a: u64| elf.function_at(a).map(|f| &*f.raw);
        assert_eq!(at(0x1010), Some("main"));
        assert_eq!(at(0x1040), None, "past main's size");
        assert_eq!(at(0x1800), Some("asm_loop"));
        assert_eq!(at(0x1eff), Some("asm_loop"), "up to the end of its section");
        assert_eq!(at(0x1f00), Some("_fini"));
        assert_eq!(at(0x1f0c), Some("_fini"));
        assert_eq!(at(0x1f0d), None, "past the end of .fini");
        assert_eq!(at(0x4010), None, "data is no function");
        assert_eq!(at(u64::MAX), None);
        // At the top of the address space, without overflow.
        let edge = with_functions(vec![symbol("edge", u64::MAX, 0, u64::MAX)]);
        let _ = edge.function_at(u64::MAX);
        assert_eq!(edge.function_at(u64::MAX - 1), None);
    }

    #[test]
    fn reads_this_test_binarys_own_symbols() {
        let exe = std::env::current_exe().unwrap();
        let elf = ElfInfo::open(&exe).unwrap();
        assert!(elf.functions.len() > 100);
        let main = elf
            .functions
            .iter()
            .find(|f| &*f.raw == "main")
            .expect("main");
        assert_eq!(
            elf.function_at(main.address).map(|f| &f.raw),
            Some(&main.raw)
        );
        let offset = elf.file_offset(main.address).unwrap();
        assert_eq!(elf.vaddr_of_offset(offset), Some(main.address));
        assert!(ElfInfo::open(Path::new("/proc/self/status")).is_err());
    }
}
