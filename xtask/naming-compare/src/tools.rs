//! The two ways of naming a file address down to its source line and inlined functions:
//! cg-agent's (its ELF symbols for the function, `lines::read` + `SourceLines::frames`, i.e.
//! addr2line 0.25, for inlined functions and lines) and blazesym's (`symbolize::Symbolizer`
//! on `Source::Elf` with code info and inlined functions), both giving the same [`Frame`]s.
//!
//! Neither keeps a per-address cache here: cg-agent's `Symbolizer` caches each address's
//! frames on top of `SourceLines`, and would do the same on top of blazesym, so only the
//! engines underneath are compared.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow};
use blazesym::symbolize::{
    Input, Symbolized, Symbolizer,
    source::{Elf, Source},
};
use cg_agent::functions::{
    debuginfo::{DebugDirs, SymbolSource},
    elf::{ElfInfo, demangle},
    lines::{self, SourceLines, TEXT_MAX_CHARS},
    symbolize::load_symbols,
};

/// One frame at an address, innermost first, as cg-trace names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Demangled by cg-agent's `demangle` (no Rust hash, no C++ parameters), whichever tool
    /// found the raw name.
    pub function: String,
    /// The source file as the tool gives it (a path) and the line.
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A file's symbols and line tables through cg-agent.
pub struct CgAgent {
    elf: ElfInfo,
    lines: Option<SourceLines>,
    /// Where its symbols came from (its own `.symtab`, a debug file, MiniDebugInfo).
    pub source: SymbolSource,
}

impl CgAgent {
    /// Reads `path`'s symbols as cg-agent's `Symbolizer` does (its own `.symtab`, else its
    /// debug file's).
    pub fn symbols(path: &Path, dirs: &DebugDirs) -> Result<(ElfInfo, SymbolSource)> {
        load_symbols(path, dirs, &mut Vec::new())
            .ok_or_else(|| anyhow!("{}: no symbols read", path.display()))
    }

    /// Adds `path`'s line tables to its symbols: its own, else those of the debug file its
    /// symbols came from (`Symbolizer::line_tables`).
    pub fn with_lines(
        path: &Path,
        (elf, source): (ElfInfo, SymbolSource),
        dirs: &DebugDirs,
    ) -> Result<Self> {
        let debug_file = match &source {
            SymbolSource::DebugFile(debug) => Some(debug.clone()),
            _ => None,
        };
        let lines = lines::read(path, debug_file.as_deref(), dirs)
            .with_context(|| format!("line tables of {}", path.display()))?;
        Ok(CgAgent { elf, lines, source })
    }

    pub fn open(path: &Path, dirs: &DebugDirs) -> Result<Self> {
        Self::with_lines(path, Self::symbols(path, dirs)?, dirs)
    }

    /// The functions with a size, as `bench_with` picks its addresses from: (address, size).
    pub fn functions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.elf
            .functions
            .iter()
            .filter(|f| f.size > 0)
            .map(|f| (f.address, f.size))
    }

    /// The symbol table's name of the function at `vaddr`.
    pub fn symbol(&self, vaddr: u64) -> Option<&str> {
        self.elf.function_at(vaddr).map(|s| s.name())
    }

    /// addr2line's answer as `SourceLines::frames` gives it.
    pub fn source_frames(&self, vaddr: u64) -> Vec<lines::SourceFrame> {
        self.lines
            .as_ref()
            .map(|l| l.frames(vaddr))
            .unwrap_or_default()
    }

    /// The frames at `vaddr` as cg-trace names them (`Symbolizer::native_frames`).
    pub fn frames(&self, vaddr: u64) -> Vec<Frame> {
        named_as_cg_trace(self.dwarf_frames(vaddr), self.symbol(vaddr))
    }

    /// What addr2line says of `vaddr`, innermost first, names from DWARF (the outermost
    /// from the symbol table where DWARF has none, as blazesym does).
    pub fn dwarf_frames(&self, vaddr: u64) -> Vec<Frame> {
        let found = self.source_frames(vaddr);
        let last = found.len().saturating_sub(1);
        let mut frames: Vec<Frame> = found
            .into_iter()
            .enumerate()
            .map(|(i, f)| Frame {
                function: match f.function {
                    Some(name) => name,
                    None if i == last => self.symbol(vaddr).unwrap_or(UNKNOWN).into(),
                    None => UNKNOWN.into(),
                },
                file: f.file,
                line: f.line,
            })
            .collect();
        if frames.is_empty()
            && let Some(symbol) = self.symbol(vaddr)
        {
            frames.push(Frame {
                function: symbol.into(),
                file: None,
                line: None,
            });
        }
        frames
    }
}

/// A function DWARF does not name.
const UNKNOWN: &str = "[unknown inlined]";

/// A DWARF answer as `Symbolizer::line_frames` turns it into frames: the outermost keeps its
/// symbol table name; no frame with both a file and a line gives the symbol alone; empty
/// when no symbol covers the address.
pub fn named_as_cg_trace(dwarf: Vec<Frame>, symbol: Option<&str>) -> Vec<Frame> {
    let Some(symbol) = symbol else {
        return Vec::new();
    };
    if dwarf.iter().all(|f| f.line.is_none() || f.file.is_none()) {
        return vec![Frame {
            function: symbol.into(),
            file: None,
            line: None,
        }];
    }
    let last = dwarf.len() - 1;
    dwarf
        .into_iter()
        .enumerate()
        .map(|(i, f)| Frame {
            function: if i == last { symbol.into() } else { f.function },
            ..f
        })
        .collect()
}

/// A file through blazesym.
pub struct Blazesym {
    symbolizer: Symbolizer,
    source: Source<'static>,
}

impl Blazesym {
    /// A symbolizer for `path` with source lines and inlined functions, looking for debug
    /// files in `dirs` (as cg-agent does), names left mangled (see [`Frame::function`]),
    /// and without re-checking the file at each call (cg-trace knows when files change).
    pub fn open(path: &Path, dirs: &DebugDirs) -> Self {
        let symbolizer = Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(false)
            .enable_auto_reload(false)
            .set_debug_dirs(Some(dirs.0.iter().map(PathBuf::as_path)))
            .build();
        let source = Source::Elf(Elf::new(path));
        Blazesym { symbolizer, source }
    }

    /// The frames at `vaddr`, innermost first, names from DWARF (the outermost from the
    /// symbol table where DWARF has none); empty when blazesym knows nothing of it.
    pub fn frames(&self, vaddr: u64) -> Result<Vec<Frame>> {
        let found = self
            .symbolizer
            .symbolize(&self.source, Input::VirtOffset(&[vaddr]))
            .map_err(|e| anyhow!("blazesym: {e}"))?;
        Ok(found.into_iter().next().map(to_frames).unwrap_or_default())
    }

    /// The frames of each of `vaddrs`, in one call (blazesym's batched interface).
    pub fn frames_batched(&self, vaddrs: &[u64]) -> Result<Vec<Vec<Frame>>> {
        let found = self
            .symbolizer
            .symbolize(&self.source, Input::VirtOffset(vaddrs))
            .map_err(|e| anyhow!("blazesym: {e}"))?;
        Ok(found.into_iter().map(to_frames).collect())
    }
}

/// blazesym's answer as frames, innermost first. It gives the outer function with the
/// location of its first inlined call, then each inlined function (outermost first) with
/// the location inside it; the last one's is the address's own. Line 0 (code of no line)
/// is no line, as addr2line says it.
fn to_frames(found: Symbolized<'_>) -> Vec<Frame> {
    let Symbolized::Sym(sym) = found else {
        return Vec::new();
    };
    let location = |info: Option<&blazesym::symbolize::CodeInfo<'_>>| match info {
        Some(info) => (
            Some(bounded(info.to_path().display().to_string())),
            info.line.filter(|&line| line != 0),
        ),
        None => (None, None),
    };
    let (file, line) = location(sym.code_info.as_deref());
    let mut frames = vec![Frame {
        function: bounded(demangle(&sym.name)),
        file,
        line,
    }];
    for inlined in sym.inlined.iter() {
        let (file, line) = location(inlined.code_info.as_ref());
        frames.push(Frame {
            function: bounded(demangle(&inlined.name)),
            file,
            line,
        });
    }
    frames.reverse();
    frames
}

/// `text` cut to cg-agent's [`TEXT_MAX_CHARS`], as it cuts DWARF's names and paths.
fn bounded(text: String) -> String {
    match text.char_indices().nth(TEXT_MAX_CHARS) {
        Some((end, _)) => text[..end].to_string(),
        None => text,
    }
}
