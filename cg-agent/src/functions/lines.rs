//! Source lines of native code: which function (inlined ones included), file and line an
//! address is at, from a file's DWARF (`.debug_info`, `.debug_line` and the sections they
//! refer to) through `addr2line` (gimli), as `addr2line -i -f` and perf's srcline say it;
//! with the supplementary file that dwz moved shared DWARF into, when a file names one.
//!
//! Every file here is outside data: it is opened as [`super::elf::open_regular`] says (a
//! regular file, at most [`super::elf::ELF_MAX_BYTES`]; a debug file as
//! [`super::debuginfo::open_debug_file`] says, once it passes its check) and only its headers
//! and DWARF sections are read, at most [`DWARF_MAX_BYTES`] together once decompressed
//! ([`section_bytes`]: zlib-compressed sections are decompressed under that cap; other
//! compressions are refused), and at most [`DWARF_TOTAL_MAX_BYTES`] for all files; names and
//! paths are cut to [`TEXT_MAX_CHARS`]. Malformed DWARF gives no lines, never a panic.

use std::{path::Path, sync::Arc};

use object::{
    Endianness, Object as _, ReadRef,
    read::{ReadCache, elf::ElfFile64},
};

use super::{
    debuginfo::{AltLink, DebugDirs, DebugRefs, candidates, open_debug_file},
    elf::{SectionError, demangle, section_bytes},
};

/// The most DWARF bytes kept for one file (decompressed).
pub const DWARF_MAX_BYTES: u64 = 512 << 20;
/// The most DWARF bytes kept for all the files of a run together: past it, further files
/// are named without lines (and a note says so).
pub const DWARF_TOTAL_MAX_BYTES: u64 = 1 << 30;
/// The longest function name or file path kept from DWARF.
pub const TEXT_MAX_CHARS: usize = 1024;

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// Why a file's DWARF gave no lines.
#[derive(Debug, thiserror::Error)]
pub enum LinesError {
    #[error("not an ELF file we can read ({0})")]
    Elf(String),
    #[error("its DWARF is larger than {} MiB", DWARF_MAX_BYTES >> 20)]
    TooLarge,
    #[error("section {0} is compressed in a format other than zlib")]
    Compression(String),
    #[error("section {0}: {1}")]
    Section(String, String),
    #[error("DWARF: {0}")]
    Dwarf(String),
    #[error("its debug file {0} no longer matches it")]
    Changed(String),
}

/// One frame at an address, innermost (inlined) first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFrame {
    /// The function's name from DWARF (demangled); `None` when DWARF does not name it.
    pub function: Option<String>,
    /// The source file (as DWARF gives it: usually a full path) and line.
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A file's line tables and inlining information.
pub struct SourceLines {
    context: addr2line::Context<Reader>,
    /// The DWARF bytes it keeps.
    pub bytes: u64,
}

impl SourceLines {
    /// The lines of the ELF file in `bytes`; `Ok(None)` when it has no line table.
    pub fn parse(bytes: &[u8]) -> Result<Option<Self>, LinesError> {
        let file = ElfFile64::<Endianness>::parse(bytes).map_err(elf_error)?;
        Self::of(&file, None::<&ElfFile64<'_, Endianness>>)
    }

    /// The lines of a parsed ELF file (only its DWARF sections are read), with the
    /// supplementary file (dwz's, [`AltLink`]) that the file's DWARF refers to, when it has
    /// one: its sections count in the same [`DWARF_MAX_BYTES`]. `Ok(None)` when the file has
    /// no line table.
    fn of<'a, 'b, R: ReadRef<'a>, S: ReadRef<'b>>(
        file: &ElfFile64<'a, Endianness, R>,
        sup: Option<&ElfFile64<'b, Endianness, S>>,
    ) -> Result<Option<Self>, LinesError> {
        if file.section_by_name(".debug_line").is_none() {
            return Ok(None);
        }
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let mut budget = DWARF_MAX_BYTES;
        let mut dwarf = gimli::Dwarf::load(|id| reader(file, id, &mut budget, endian))?;
        if let Some(sup) = sup {
            dwarf.load_sup(|id| reader(sup, id, &mut budget, endian))?;
        }
        let context =
            addr2line::Context::from_dwarf(dwarf).map_err(|e| LinesError::Dwarf(e.to_string()))?;
        Ok(Some(SourceLines {
            context,
            bytes: DWARF_MAX_BYTES - budget,
        }))
    }

    /// The frames at `vaddr` (an address in the file's own address space), innermost
    /// first: inlined functions, then the function they were inlined into. Empty when DWARF
    /// knows nothing of the address.
    pub fn frames(&self, vaddr: u64) -> Vec<SourceFrame> {
        let mut out = Vec::new();
        // addr2line 0.25 looks up [vaddr, vaddr + 1) and overflows on the last address (found
        // by the elf_symbols fuzz target); no code is there.
        if vaddr == u64::MAX {
            return out;
        }
        let Ok(mut frames) = self.context.find_frames(vaddr).skip_all_loads() else {
            return out;
        };
        // A corrupt file could describe inlining without end.
        while let Ok(Some(frame)) = frames.next()
            && out.len() < 256
        {
            let function = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|name| bounded(&demangle(&name)));
            let (file, line) = match frame.location {
                Some(l) => (l.file.map(bounded), l.line),
                None => (None, None),
            };
            out.push(SourceFrame {
                function,
                file,
                line,
            });
        }
        out
    }
}

/// A DWARF section's bytes for gimli, decompressed, taken from `budget`; empty when the file
/// lacks it.
fn reader<'a, R: ReadRef<'a>>(
    file: &ElfFile64<'a, Endianness, R>,
    id: gimli::SectionId,
    budget: &mut u64,
    endian: gimli::RunTimeEndian,
) -> Result<Reader, LinesError> {
    let name = id.name();
    let Some(section) = file.section_by_name(name) else {
        return Ok(Reader::new(Arc::from(&[][..]), endian));
    };
    let data = section_bytes(&section, *budget).map_err(|e| match e {
        SectionError::TooLarge(_) => LinesError::TooLarge,
        SectionError::Compression => LinesError::Compression(name.into()),
        SectionError::Malformed(reason) => LinesError::Section(name.into(), reason),
    })?;
    *budget -= data.len() as u64;
    Ok(Reader::new(Arc::from(data.as_ref()), endian))
}

fn elf_error(e: impl std::fmt::Display) -> LinesError {
    LinesError::Elf(e.to_string())
}

/// The line tables of the file at `path`: its own, else those of its separate debug file
/// `debug_file` (the one [`super::debuginfo`] found its symbols in), read again only when it
/// still passes the same check (build id or CRC-32) as when its symbols were read. Only the
/// files' headers and DWARF sections are read (a file without line tables costs its headers).
pub fn read(
    path: &Path,
    debug_file: Option<&Path>,
    dirs: &DebugDirs,
) -> Result<Option<SourceLines>, LinesError> {
    let cache = ReadCache::new(super::elf::open_regular(path).map_err(elf_error)?);
    let elf = ElfFile64::<Endianness, _>::parse(&cache).map_err(elf_error)?;
    if let Some(lines) = with_sup(path, &elf, dirs)? {
        return Ok(Some(lines));
    }
    let Some(debug_file) = debug_file else {
        return Ok(None);
    };
    let changed = || LinesError::Changed(debug_file.display().to_string());
    let check = candidates(path, &DebugRefs::of(&elf), dirs)
        .into_iter()
        .find_map(|(candidate, check)| (candidate == debug_file).then_some(check))
        .ok_or_else(changed)?;
    let debug = open_debug_file(debug_file, &check)
        .ok()
        .flatten()
        .ok_or_else(changed)?;
    let debug_elf = ElfFile64::<Endianness, _>::parse(&debug).map_err(elf_error)?;
    with_sup(debug_file, &debug_elf, dirs)
}

/// The lines of the parsed file at `path` (`Ok(None)` without a line table), with its
/// supplementary file when it names one that is found and passes its check; without it
/// (logged), lines stay but names that only the supplementary file holds do not
/// (`[unknown inlined]`).
fn with_sup<'a, R: ReadRef<'a>>(
    path: &Path,
    elf: &ElfFile64<'a, Endianness, R>,
    dirs: &DebugDirs,
) -> Result<Option<SourceLines>, LinesError> {
    let Some(link) = AltLink::of(elf) else {
        return SourceLines::of(elf, None::<&ElfFile64<'_, Endianness>>);
    };
    let found = link
        .candidates(path, dirs)
        .into_iter()
        .find_map(|candidate| open_debug_file(&candidate, &link.check()).ok().flatten());
    let Some(sup) = found else {
        tracing::debug!(
            "{}: its supplementary DWARF file {} was not found",
            path.display(),
            link.path.display()
        );
        return SourceLines::of(elf, None::<&ElfFile64<'_, Endianness>>);
    };
    let sup_elf = ElfFile64::<Endianness, _>::parse(&sup).map_err(elf_error)?;
    SourceLines::of(elf, Some(&sup_elf))
}

/// `text` cut to [`TEXT_MAX_CHARS`].
fn bounded(text: &str) -> String {
    match text.char_indices().nth(TEXT_MAX_CHARS) {
        Some((end, _)) => text[..end].to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_truncated_files_give_an_error_not_a_panic() {
        assert!(SourceLines::parse(b"not an ELF file").is_err());
        // This test binary's headers with its sections cut off: the section table points
        // past the end.
        let exe = std::fs::read("/proc/self/exe").unwrap();
        for len in [64, 4096, 1 << 16] {
            let _ = SourceLines::parse(&exe[..len.min(exe.len())]);
        }
    }

    /// `fuzz/seeds/elf_symbols/dwarf-inline*`: `inner` (line 1, always_inline) inlined into
    /// `outer` (line 2) at 0x40100d-0x401018, built `gcc -O0 -g` (and `-gz=zlib`) with
    /// `-nostdlib -static`.
    #[test]
    fn an_inlined_function_comes_before_its_caller_from_plain_and_zlib_dwarf() {
        for bytes in [
            &include_bytes!("../../../fuzz/seeds/elf_symbols/dwarf-inline")[..],
            &include_bytes!("../../../fuzz/seeds/elf_symbols/dwarf-inline-zlib")[..],
        ] {
            let lines = SourceLines::parse(bytes).unwrap().expect("line tables");
            let at = |vaddr| {
                lines
                    .frames(vaddr)
                    .into_iter()
                    .map(|f| {
                        let file = f.file.unwrap_or_default();
                        assert!(file.ends_with("/inline.c"), "{file}");
                        (f.function.unwrap_or_default(), f.line.unwrap_or(0))
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(at(0x401010), [("inner".into(), 1), ("outer".into(), 2)]);
            assert_eq!(at(0x401000), [("outer".to_string(), 2)]);
            assert!(at(0x10).is_empty());
            assert!(at(u64::MAX).is_empty());
        }
    }

    #[test]
    fn names_and_paths_are_cut_at_a_character_boundary() {
        let long = "é".repeat(TEXT_MAX_CHARS + 10);
        assert_eq!(bounded(&long).chars().count(), TEXT_MAX_CHARS);
        assert_eq!(bounded("short"), "short");
    }
}
