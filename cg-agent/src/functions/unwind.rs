//! Unwinding sampled user stacks without frame pointers (`--stacks auto|dwarf`): the sampler
//! copies a thread's user registers and the top of its user stack, and here
//! [framehop](https://docs.rs/framehop) (samply's unwinder) walks that copy with the call
//! frame information (`.eh_frame`, `.eh_frame_hdr`; `.debug_frame`, the file's own or its
//! separate debug file's, where it describes more of its code: [`FileCfi::parse_with`]) of
//! the files the process maps, placed at
//! the addresses `/proc/PID/maps` gives. What is read from each file is kept for the run
//! ([`CfiFiles`]); each process gets its own unwinder ([`ProcessUnwinder`]).
//!
//! The files are outside input: opened as the symbolizer opens them ([`elf::open_regular`]:
//! a regular file, without blocking), and only their headers and the sections used are read
//! (not the code and DWARF that make up most of a large binary), each only when it lies
//! inside the file and is at most [`CFI_MAX_BYTES`] long, decompressed if need be
//! ([`elf::section_bytes`]). framehop itself bounds what it reads from the copied stack and
//! stops at the first frame it cannot unwind.

use std::{
    collections::HashMap,
    ops::Range,
    path::{Path, PathBuf},
    sync::Arc,
};

use cg_common::profiling::STACK_MAX_DEPTH;
use framehop::{
    ExplicitModuleSectionInfo, Module, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use object::{
    Endianness, Object as _, ObjectSection as _, ReadRef,
    read::{ReadCache, elf::ElfFile64},
};

use super::{
    debuginfo::{Check, DebugDirs, DebugRefs, candidates, open_debug_file},
    elf::{self, Segment},
    maps::{Mapping, ProcMaps},
};

/// The largest section kept for unwinding (`.eh_frame`, `.eh_frame_hdr`); a file with a
/// larger one is walked by frame pointer. (`.text` is not kept: framehop reads code only for
/// Mach-O's compact unwind information.)
pub const CFI_MAX_BYTES: u64 = 256 << 20;

/// Process images whose unwinders are kept; past this they are all dropped and rebuilt as
/// samples come (the files' unwind information stays read), so that a machine-wide run
/// with many short-lived processes does not keep one per process ever sampled.
pub const UNWINDERS_KEPT: usize = 256;

/// What unwinding needs from one ELF file: its loadable segments (to place it) and its
/// sections, as framehop takes them.
#[derive(Debug)]
pub struct FileCfi {
    segments: Vec<Segment>,
    sections: ExplicitModuleSectionInfo<Arc<[u8]>>,
}

impl FileCfi {
    /// The unwind information of an ELF image; `None` when it has none (or it cannot be
    /// read): such a file is walked by frame pointer. Code built without unwind tables
    /// (`-fno-asynchronous-unwind-tables -g`) has its frames in `.debug_frame` only, while
    /// the start-up objects linked with it still bring a small `.eh_frame`: the section
    /// that describes more code is used (framehop reads one of the two).
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        Self::parse_with(bytes, |_| None)
    }

    /// As [`Self::of`], for a file in `bytes`.
    pub fn parse_with(
        bytes: &[u8],
        separate: impl FnOnce(&ElfFile64<'_, Endianness>) -> Option<SeparateDebugFile>,
    ) -> Option<Self> {
        let file = ElfFile64::<Endianness>::parse(bytes).ok()?;
        Self::of(&file, separate)
    }

    /// The unwind information of a parsed file, for a file that may have a separate debug
    /// file (`separate` finds it, without reading it): where the file's own sections
    /// describe less than half of its code (a stripped file built without unwind tables),
    /// the debug file's `.debug_frame` is read, and used when it describes more. (Coverage
    /// is counted only where there is a choice: it walks every entry, a few ms for libc.)
    /// Only the sections used are read from `file`.
    pub fn of<'data, R: ReadRef<'data>>(
        file: &ElfFile64<'data, Endianness, R>,
        separate: impl FnOnce(&ElfFile64<'data, Endianness, R>) -> Option<SeparateDebugFile>,
    ) -> Option<Self> {
        let got_svma = file.section_by_name(".got").map(|s| svma_range(&s));
        let eh_frame = section(file, ".eh_frame");
        let own_debug_frame = section(file, ".debug_frame").map(|(_, data)| data);
        let separate = separate(file);
        let debug_frame = if own_debug_frame.is_none() && separate.is_none() {
            None
        } else {
            let eh_covered = eh_frame.as_ref().map_or(0, |(svma, data)| {
                eh_frame_coverage(data, svma, got_svma.as_ref())
            });
            let mut best = own_debug_frame
                .map(|data| (debug_frame_coverage(&data), data))
                .filter(|(covered, _)| *covered > eh_covered);
            let own = best.as_ref().map_or(eh_covered, |(covered, _)| *covered);
            if own < code_bytes(file) / 2
                && let Some(data) = separate.and_then(|debug| debug.debug_frame())
            {
                let covered = debug_frame_coverage(&data);
                if covered > own {
                    best = Some((covered, data));
                }
            }
            best.map(|(_, data)| data)
        };
        let mut sections = ExplicitModuleSectionInfo {
            base_svma: 0,
            got_svma,
            ..ExplicitModuleSectionInfo::default()
        };
        if debug_frame.is_some() {
            sections.debug_frame = debug_frame;
        } else {
            let (eh_frame_svma, eh_frame) = eh_frame?;
            let (eh_frame_hdr_svma, eh_frame_hdr) = section(file, ".eh_frame_hdr").unzip();
            sections.eh_frame_svma = Some(eh_frame_svma);
            sections.eh_frame = Some(eh_frame);
            sections.eh_frame_hdr_svma = eh_frame_hdr_svma;
            sections.eh_frame_hdr = eh_frame_hdr;
        }
        Some(FileCfi {
            segments: elf::load_segments(file),
            sections,
        })
    }
}

/// Bytes of the file's code (its executable sections).
fn code_bytes<'data, R: ReadRef<'data>>(file: &ElfFile64<'data, Endianness, R>) -> u64 {
    file.sections()
        .filter(|s| s.kind() == object::SectionKind::Text)
        .map(|s| s.size())
        .fold(0, u64::saturating_add)
}

/// A file's separate debug file: found (it exists), not yet read.
#[derive(Debug)]
pub struct SeparateDebugFile {
    path: PathBuf,
    check: Check,
}

impl SeparateDebugFile {
    /// The first of `path`'s candidate debug files (by build id, then by debug link, as for
    /// its symbols) that exists.
    fn find<'data, R: ReadRef<'data>>(
        path: &Path,
        file: &ElfFile64<'data, Endianness, R>,
        dirs: &DebugDirs,
    ) -> Option<Self> {
        candidates(path, &DebugRefs::of(file), dirs)
            .into_iter()
            .find(|(candidate, _)| candidate.is_file())
            .map(|(path, check)| SeparateDebugFile { path, check })
    }

    /// Its `.debug_frame`, when it passes its check (build id or CRC-32).
    fn debug_frame(&self) -> Option<Arc<[u8]>> {
        let cache = match open_debug_file(&self.path, &self.check) {
            Ok(found) => found?,
            Err(err) => {
                tracing::debug!("{}: not read: {err}", self.path.display());
                return None;
            }
        };
        let debug = ElfFile64::<Endianness, _>::parse(&cache).ok()?;
        section(&debug, ".debug_frame").map(|(_, data)| data)
    }
}

/// Bytes of code that a `.debug_frame` section's entries describe.
fn debug_frame_coverage(data: &[u8]) -> u64 {
    let mut section = gimli::DebugFrame::new(data, gimli::LittleEndian);
    section.set_address_size(8);
    cfi_coverage(&section, &gimli::BaseAddresses::default())
}

/// Bytes of code that an `.eh_frame` section's entries describe (its pointers may be
/// relative to the section itself, or to `.got`).
fn eh_frame_coverage(data: &[u8], svma: &Range<u64>, got: Option<&Range<u64>>) -> u64 {
    let section = gimli::EhFrame::new(data, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(svma.start);
    if let Some(got) = got {
        bases = bases.set_got(got.start);
    }
    cfi_coverage(&section, &bases)
}

/// Most call frame entries looked at per section to judge its coverage.
const CFI_ENTRIES_COUNTED: usize = 1 << 20;

/// The summed lengths of the code ranges a section's frame description entries cover;
/// entries that do not parse count nothing, and counting stops at the first malformed
/// header.
fn cfi_coverage<'a, S>(section: &S, bases: &gimli::BaseAddresses) -> u64
where
    S: gimli::UnwindSection<gimli::EndianSlice<'a, gimli::LittleEndian>>,
{
    let mut entries = section.entries(bases);
    let mut covered = 0u64;
    for _ in 0..CFI_ENTRIES_COUNTED {
        match entries.next() {
            Ok(Some(gimli::CieOrFde::Fde(partial))) => {
                if let Ok(fde) =
                    partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
                {
                    covered = covered.saturating_add(fde.len());
                }
            }
            Ok(Some(gimli::CieOrFde::Cie(_))) => {}
            Ok(None) | Err(_) => break,
        }
    }
    covered
}

fn svma_range<'data, R: ReadRef<'data>>(
    section: &object::read::elf::ElfSection64<'data, '_, Endianness, R>,
) -> Range<u64> {
    section.address()..section.address().saturating_add(section.size())
}

/// A section's address range and bytes, when it lies inside the file and is at most
/// [`CFI_MAX_BYTES`] long, decompressed if it is compressed (a debug file's `.debug_frame`
/// often is: `-gz`, Debian's `-dbgsym` packages).
fn section<'data, R: ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
    name: &str,
) -> Option<(Range<u64>, Arc<[u8]>)> {
    let section = file.section_by_name(name)?;
    let data = match elf::section_bytes(&section, CFI_MAX_BYTES) {
        Ok(data) => data,
        Err(err) => {
            tracing::debug!("{name}: {err}");
            return None;
        }
    };
    (!data.is_empty()).then(|| (svma_range(&section), Arc::from(data.as_ref())))
}

/// The unwind information of each file met, read once per run.
#[derive(Debug, Default)]
pub struct CfiFiles {
    files: HashMap<PathBuf, Option<Arc<FileCfi>>>,
    /// Where separate debug files are looked up (`--debug-dir`).
    debug_dirs: DebugDirs,
}

impl CfiFiles {
    /// Files whose separate debug files are looked up in `debug_dirs`.
    pub fn with_debug_dirs(debug_dirs: DebugDirs) -> Self {
        CfiFiles {
            files: HashMap::new(),
            debug_dirs,
        }
    }

    /// `path`'s unwind information (`None`: it has none, or it cannot be read).
    pub fn get(&mut self, path: &Path) -> Option<Arc<FileCfi>> {
        let dirs = &self.debug_dirs;
        self.files
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                // Only the headers and the sections used are read (a large binary's file is
                // mostly code and DWARF, which unwinding does not need).
                let file = elf::open_regular(path)
                    .inspect_err(|err| tracing::debug!("unwind information: {err}"))
                    .ok()?;
                let cache = ReadCache::new(file);
                let elf = ElfFile64::<Endianness, _>::parse(&cache).ok()?;
                FileCfi::of(&elf, |file| SeparateDebugFile::find(path, file, dirs)).map(Arc::new)
            })
            .clone()
    }
}

/// The address where the file's virtual address 0 lands, from an executable mapping of it:
/// through the executable segment that the mapping holds. (Not through the mapping's first
/// byte: a segment need not start on a page, and the page it starts on may belong to the
/// segment before, as lld lays files out.)
fn load_base(segments: &[Segment], m: &Mapping) -> Option<u64> {
    let len = m.end.checked_sub(m.start)?;
    let mapped = m.offset..m.offset.checked_add(len)?;
    let segment = segments
        .iter()
        .filter(|s| s.executable)
        .find(|s| s.offset < mapped.end && s.offset.saturating_add(s.filesz) > mapped.start)?;
    // Where the segment's first byte lands, minus its virtual address.
    m.start
        .checked_add(segment.offset.checked_sub(m.offset)?)?
        .checked_sub(segment.vaddr)
}

/// A sampled thread's user registers and the copy of the top of its stack.
#[derive(Clone, Copy, Debug)]
pub struct StackCopy<'a> {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// The address of `bytes[0]`.
    pub base: u64,
    pub bytes: &'a [u8],
}

impl StackCopy<'_> {
    /// The 8 bytes at `address`, when the copy holds them.
    fn word(&self, address: u64) -> Option<u64> {
        let start = usize::try_from(address.checked_sub(self.base)?).ok()?;
        let bytes = self.bytes.get(start..start.checked_add(8)?)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }
}

/// One process's unwinder: the unwind information of the files it maps, at their addresses.
pub struct ProcessUnwinder {
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    cache: CacheX86_64,
    /// Address ranges of the modules added (those with unwind information).
    modules: Vec<Range<u64>>,
}

impl ProcessUnwinder {
    /// Places the unwind information of each executable file mapping of `maps`.
    pub fn new(maps: &ProcMaps, files: &mut CfiFiles) -> Self {
        let mut unwinder = UnwinderX86_64::new();
        let mut modules = Vec::new();
        for m in maps.mappings.iter().filter(|m| m.executable) {
            let Some(path) = m.path.as_ref() else {
                continue;
            };
            if path.as_os_str().as_encoded_bytes().starts_with(b"[") {
                continue;
            }
            let Some(cfi) = files.get(path) else { continue };
            let Some(base_avma) = load_base(&cfi.segments, m) else {
                continue;
            };
            unwinder.add_module(Module::new(
                path.display().to_string(),
                m.start..m.end,
                base_avma,
                cfi.sections.clone(),
            ));
            modules.push(m.start..m.end);
        }
        ProcessUnwinder {
            unwinder,
            cache: CacheX86_64::new(),
            modules,
        }
    }

    /// Whether `address` lies in a mapped file with unwind information.
    pub fn has_cfi(&self, address: u64) -> bool {
        self.modules.iter().any(|m| m.contains(&address))
    }

    /// The stack's addresses, innermost first (the interrupted instruction, then return
    /// addresses), up to [`STACK_MAX_DEPTH`]: the walk stops at the outermost frame, or
    /// at the first frame it cannot unwind (outside the copy, or no rule for it).
    pub fn unwind(&mut self, stack: &StackCopy<'_>) -> Vec<u64> {
        let mut read_stack = |address: u64| stack.word(address).ok_or(());
        let mut frames = self.unwinder.iter_frames(
            stack.ip,
            UnwindRegsX86_64::new(stack.ip, stack.sp, stack.bp),
            &mut self.cache,
            &mut read_stack,
        );
        let mut out = Vec::new();
        while out.len() < STACK_MAX_DEPTH {
            match frames.next() {
                Ok(Some(frame)) => out.push(frame.address()),
                Ok(None) => break,
                Err(err) => {
                    tracing::trace!("unwinding stopped: {err}");
                    break;
                }
            }
        }
        tracing::trace!(
            "unwound ip {:#x} sp {:#x} bp {:#x} base {:#x} len {}: {:x?}",
            stack.ip,
            stack.sp,
            stack.bp,
            stack.base,
            stack.bytes.len(),
            out
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(offset: u64, vaddr: u64, filesz: u64, executable: bool) -> Segment {
        Segment {
            vaddr,
            memsz: filesz,
            offset,
            filesz,
            executable,
        }
    }

    fn mapping(start: u64, end: u64, offset: u64) -> Mapping {
        Mapping {
            start,
            end,
            offset,
            executable: true,
            path: None,
        }
    }

    #[test]
    fn a_file_is_placed_through_its_executable_segment() {
        // GNU ld: segments start on pages, offset == vaddr.
        //   file   0x0000 R | 0x1000 R E ...
        //   memory 0x5000_0000 R | 0x5000_1000 R E  (mapped from offset 0x1000)
        let ld = [
            segment(0, 0, 0x650, false),
            segment(0x1000, 0x1000, 0x2d5, true),
        ];
        assert_eq!(
            load_base(&ld, &mapping(0x5000_1000, 0x5000_2000, 0x1000)),
            Some(0x5000_0000)
        );
        // lld: the executable segment starts mid-page, one page later in memory than in
        // the file:   offset 0x13010 -> vaddr 0x14010; the mapping starts on the page
        // before it (offset 0x13000, which the R segment also holds).
        let lld = [
            segment(0, 0, 0x13010, false),
            segment(0x13010, 0x14010, 0x3dcc0, true),
        ];
        assert_eq!(
            load_base(
                &lld,
                &mapping(0x5614_0000 + 0x14000, 0x5614_0000 + 0x52000, 0x13000)
            ),
            Some(0x5614_0000)
        );
        // A non-PIE executable at its own addresses.
        let fixed = [segment(0x1000, 0x40_1000, 0x500, true)];
        assert_eq!(
            load_base(&fixed, &mapping(0x40_1000, 0x40_2000, 0x1000)),
            Some(0)
        );
        // A mapping that holds no executable segment: not placed.
        assert_eq!(load_base(&lld, &mapping(0x1000, 0x2000, 0x60_0000)), None);
    }

    #[test]
    fn the_stack_copy_reads_whole_words_inside_it_only() {
        let bytes: Vec<u8> = (0u8..24).collect();
        let copy = StackCopy {
            ip: 1,
            sp: 0x1000,
            bp: 0,
            base: 0x1000,
            bytes: &bytes,
        };
        assert_eq!(copy.word(0x1000), Some(0x0706_0504_0302_0100));
        assert_eq!(copy.word(0x1010), Some(0x1716_1514_1312_1110));
        assert_eq!(copy.word(0x1011), None, "past the end");
        assert_eq!(copy.word(0xff8), None, "below the copy");
        assert_eq!(copy.word(u64::MAX), None);
    }

    #[test]
    fn a_file_without_eh_frame_has_no_unwind_information() {
        assert!(FileCfi::parse(b"not an ELF file").is_none());
        // This test binary has .eh_frame (Rust unwinds panics with it).
        let me = elf::read_file(Path::new("/proc/self/exe")).expect("reading own executable");
        let cfi = FileCfi::parse(&me).expect("own unwind information");
        assert!(
            cfi.sections
                .eh_frame
                .as_ref()
                .is_some_and(|d| !d.is_empty())
        );
        assert!(cfi.sections.eh_frame_hdr.is_some());
        assert!(cfi.segments.iter().any(|s| s.executable));
    }

    #[test]
    fn coverage_counts_the_code_that_call_frame_entries_describe() {
        let me = elf::read_file(Path::new("/proc/self/exe")).expect("reading own executable");
        let file = ElfFile64::<Endianness>::parse(&*me).expect("own ELF");
        let (svma, data) = section(&file, ".eh_frame").expect("own .eh_frame");
        let text = file.section_by_name(".text").expect(".text").size();
        let covered = eh_frame_coverage(&data, &svma, None);
        // Most of the code has entries (all but a few hand-written start-up bytes).
        assert!(
            covered > text / 2 && covered <= text * 2,
            "{covered} of {text}"
        );
        // Garbage, or the same bytes read as the other section kind: nothing believed.
        assert_eq!(debug_frame_coverage(b"not call frame information"), 0);
        assert_eq!(eh_frame_coverage(&[0xff; 64], &svma, None), 0);
    }

    #[test]
    fn a_file_whose_own_sections_describe_its_code_keeps_them_whatever_its_debug_file() {
        let me = elf::read_file(Path::new("/proc/self/exe")).expect("reading own executable");
        // A "debug file" that is this very file: it passes its check and has no
        // .debug_frame; the file's own .eh_frame, which covers its code, is kept.
        let id = ElfFile64::<Endianness>::parse(me.as_slice())
            .expect("own ELF")
            .build_id()
            .ok()
            .flatten()
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        let separate = |_: &ElfFile64<'_, Endianness>| {
            Some(SeparateDebugFile {
                path: PathBuf::from("/proc/self/exe"),
                check: Check::BuildId(id.clone()),
            })
        };
        let cfi = FileCfi::parse_with(&me, separate).expect("own unwind information");
        assert!(cfi.sections.eh_frame.is_some() && cfi.sections.debug_frame.is_none());
        assert!(FileCfi::parse_with(b"not an ELF file", separate).is_none());
    }

    #[test]
    fn garbled_unwind_information_and_stacks_end_the_walk_without_harm() {
        // This test binary's own file, its .eh_frame and .eh_frame_hdr scrambled in
        // different ways, unwound over a stack of random words: the walk must end, within
        // the depth bound, whatever it meets.
        let me = elf::read_file(Path::new("/proc/self/exe")).expect("reading own executable");
        let cfi = FileCfi::parse(&me).expect("own unwind information");
        let exec = cfi
            .segments
            .iter()
            .find(|s| s.executable)
            .expect("a code segment");
        let maps = ProcMaps::parse(&format!(
            "{:x}-{:x} r-xp {:08x} 00:00 1 /proc/self/exe\n",
            0x5500_0000_0000u64 + (exec.vaddr & !0xfff),
            0x5500_0000_0000u64 + exec.vaddr + exec.filesz,
            exec.offset & !0xfff
        ));
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..40 {
            let scramble = |data: &Arc<[u8]>, next: &mut dyn FnMut() -> u64| -> Arc<[u8]> {
                let mut bytes = data.to_vec();
                for _ in 0..(1 + round * 8) {
                    let at = (next() as usize) % bytes.len();
                    bytes[at] = next() as u8;
                }
                if round % 5 == 4 {
                    bytes.truncate((next() as usize) % bytes.len());
                }
                Arc::from(bytes)
            };
            let mut sections = cfi.sections.clone();
            sections.eh_frame = sections.eh_frame.as_ref().map(|d| scramble(d, &mut next));
            sections.eh_frame_hdr = sections
                .eh_frame_hdr
                .as_ref()
                .map(|d| scramble(d, &mut next));
            let garbled = Arc::new(FileCfi {
                segments: cfi.segments.clone(),
                sections,
            });
            let mut files = CfiFiles::default();
            files
                .files
                .insert(PathBuf::from("/proc/self/exe"), Some(garbled));
            let mut unwinder = ProcessUnwinder::new(&maps, &mut files);
            let stack: Vec<u8> = (0..2048).flat_map(|_| next().to_le_bytes()).collect();
            let m = &maps.mappings[0];
            let copy = StackCopy {
                ip: m.start + next() % (m.end - m.start),
                sp: 0x7ffd_0000_0000,
                bp: 0x7ffd_0000_0100,
                base: 0x7ffd_0000_0000,
                bytes: &stack,
            };
            assert!(unwinder.has_cfi(copy.ip));
            assert!(unwinder.unwind(&copy).len() <= STACK_MAX_DEPTH);
        }
    }
}
