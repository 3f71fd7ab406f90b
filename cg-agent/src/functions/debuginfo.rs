//! Finds the function symbols of a stripped file where perf and gdb find them: a separate
//! debug file named by the file's build id (`DIR/.build-id/xx/rest.debug`) or by its
//! `.gnu_debuglink` (beside the file, in its `.debug/` folder, or under `DIR` followed by
//! the file's folder; checked against the link's CRC-32), for each global debug directory
//! `DIR` (`--debug-dir`, `/usr/lib/debug` by default); else MiniDebugInfo (`.gnu_debugdata`:
//! an xz-compressed ELF file holding a `.symtab`, as Fedora ships). A debug file that dwz
//! shrank names the file of DWARF it shares with others in `.gnu_debugaltlink`
//! ([`AltLink`]: by build id in each `DIR`, or by its path, only inside a `DIR`).
//!
//! Every file here is outside data: a debug file is read only as far as its headers and
//! symbol table (never whole: they can be gigabytes of DWARF), opened without blocking and
//! only when it is a regular file; a decompressed `.gnu_debugdata` is capped at
//! [`MINI_DEBUGINFO_MAX_BYTES`]; symbol and string tables at [`SYMTAB_MAX_BYTES`]. Malformed
//! files give no symbols, never a panic. [`mini_debuginfo_symbols`] is a pure function of
//! bytes (for fuzzing).

use std::{
    fs::File,
    io::Read as _,
    path::{Path, PathBuf},
};

use object::{
    Endianness, Object as _, ObjectSection as _,
    elf::SHT_SYMTAB,
    read::{ReadCache, elf::ElfFile64},
};

pub use super::elf::SYMTAB_MAX_BYTES;
use super::elf::{OpenError, Symbol, TableError, open_outside, table_symbols};

/// Where distributions install separate debug files (`debug-file-directory` in gdb).
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";
/// The largest decompressed `.gnu_debugdata` (MiniDebugInfo is a few MB at most; a bigger
/// one is refused as a decompression bomb).
pub const MINI_DEBUGINFO_MAX_BYTES: u64 = 64 << 20;
/// Longest `.gnu_debuglink` file name believed.
const DEBUGLINK_MAX_NAME: usize = 255;
/// Longest `.gnu_debugaltlink` path believed.
const ALTLINK_MAX_PATH: usize = 4096;

/// The global debug directories searched, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugDirs(pub Vec<PathBuf>);

impl Default for DebugDirs {
    fn default() -> Self {
        DebugDirs(vec![PathBuf::from(DEFAULT_DEBUG_DIR)])
    }
}

/// Where a file's function symbols came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymbolSource {
    /// Its own `.symtab`.
    Own,
    /// A separate debug file.
    DebugFile(PathBuf),
    /// Its `.gnu_debugdata`.
    MiniDebugInfo,
    /// Only its dynamic symbols (exported functions): nothing else was found.
    DynamicOnly,
}

/// Why a debug file or MiniDebugInfo gave no symbols.
#[derive(Debug, thiserror::Error)]
pub enum DebugInfoError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Open(#[from] OpenError),
    #[error("not a 64-bit ELF file we can read ({0})")]
    Elf(String),
    #[error("decompressed, it is larger than {} MiB", MINI_DEBUGINFO_MAX_BYTES >> 20)]
    TooLarge,
    #[error("xz: {0}")]
    Xz(String),
    #[error("its symbol table is larger than {} MiB", SYMTAB_MAX_BYTES >> 20)]
    SymtabTooLarge,
    #[error("its CRC-32 is {found:#010x}, the debug link says {expected:#010x}")]
    Crc { found: u32, expected: u32 },
    #[error("its build id differs from the file's")]
    BuildId,
}

/// What a file says about its separate debug information.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DebugRefs {
    pub build_id: Option<Vec<u8>>,
    /// `.gnu_debuglink`: the debug file's name and CRC-32.
    pub debuglink: Option<(String, u32)>,
}

impl DebugRefs {
    /// Reads them from a parsed file; implausible values are dropped.
    pub fn of<'data, R: object::ReadRef<'data>>(file: &ElfFile64<'data, Endianness, R>) -> Self {
        let build_id = file
            .build_id()
            .ok()
            .flatten()
            .filter(|id| (2..=64).contains(&id.len()))
            .map(<[u8]>::to_vec);
        let debuglink = file.gnu_debuglink().ok().flatten().and_then(|(name, crc)| {
            let name = std::str::from_utf8(name).ok()?;
            // A file name, never a path: `..` or `/` would leave the searched folders.
            (!name.is_empty()
                && name.len() <= DEBUGLINK_MAX_NAME
                && !name.contains('/')
                && name != "."
                && name != "..")
                .then(|| (name.to_string(), crc))
        });
        DebugRefs {
            build_id,
            debuglink,
        }
    }
}

/// The candidate debug files of the file at `path`, in the order gdb and perf try them:
/// by build id in each debug directory, then by debug link beside the file, in its
/// `.debug/` folder and in each debug directory under the file's own folder.
pub fn candidates(path: &Path, refs: &DebugRefs, dirs: &DebugDirs) -> Vec<(PathBuf, Check)> {
    let mut out = Vec::new();
    if let Some(id) = &refs.build_id {
        for dir in &dirs.0 {
            out.push((build_id_path(dir, id), Check::BuildId(id.clone())));
        }
    }
    if let Some((name, crc)) = &refs.debuglink {
        let folder = path.parent().unwrap_or(Path::new("/"));
        let check = Check::Crc(*crc, refs.build_id.clone());
        out.push((folder.join(name), check.clone()));
        out.push((folder.join(".debug").join(name), check.clone()));
        let relative = folder.strip_prefix("/").unwrap_or(folder);
        for dir in &dirs.0 {
            out.push((dir.join(relative).join(name), check.clone()));
        }
    }
    // The file itself is no debug file of its own (a debug link naming itself).
    out.retain(|(candidate, _)| candidate != path);
    out
}

/// `.gnu_debugaltlink`: the supplementary file of DWARF that dwz moved out of several debug
/// files (what they share: types, inlined functions' names, strings), as Debian's and
/// Fedora's debug packages ship it (`/usr/lib/debug/.dwz/...`), named by a path and its
/// build id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AltLink {
    pub path: PathBuf,
    pub build_id: Vec<u8>,
}

impl AltLink {
    /// The link in a parsed file; `None` when it has none or it is implausible.
    pub fn of<'data, R: object::ReadRef<'data>>(
        file: &ElfFile64<'data, Endianness, R>,
    ) -> Option<Self> {
        let section = file.section_by_name(".gnu_debugaltlink")?;
        if section.size() > (ALTLINK_MAX_PATH + 1 + 64) as u64 {
            return None;
        }
        let data = section.data().ok()?;
        let nul = data.iter().position(|&b| b == 0)?;
        let path = std::str::from_utf8(&data[..nul]).ok()?;
        let build_id = &data[nul + 1..];
        (!path.is_empty() && path.len() <= ALTLINK_MAX_PATH && (2..=64).contains(&build_id.len()))
            .then(|| AltLink {
                path: PathBuf::from(path),
                build_id: build_id.to_vec(),
            })
    }

    /// Where the supplementary file may be, for a debug file at `debug_file`: by build id in
    /// each debug directory, then by its path, only where that lies inside a debug
    /// directory (an absolute path under `/usr/lib/debug` is looked up under each
    /// directory instead; a relative one is taken from `debug_file`'s folder). Each must
    /// pass [`Self::check`].
    pub fn candidates(&self, debug_file: &Path, dirs: &DebugDirs) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = dirs
            .0
            .iter()
            .map(|dir| build_id_path(dir, &self.build_id))
            .collect();
        let named = if self.path.is_absolute() {
            lexical(&self.path)
        } else {
            lexical(
                &debug_file
                    .parent()
                    .unwrap_or(Path::new("/"))
                    .join(&self.path),
            )
        };
        if let Some(named) = named {
            match named.strip_prefix(DEFAULT_DEBUG_DIR) {
                Ok(rest) => out.extend(dirs.0.iter().map(|dir| dir.join(rest))),
                Err(_) if dirs.0.iter().any(|dir| named.starts_with(dir)) => out.push(named),
                Err(_) => {}
            }
        }
        out
    }

    /// How the supplementary file is recognised: by the build id the link gives.
    pub fn check(&self) -> Check {
        Check::BuildId(self.build_id.clone())
    }
}

/// `path` with its `.` and `..` taken out lexically (no link followed); `None` for a
/// relative path or one that climbs above `/`.
fn lexical(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            Component::Normal(name) => out.push(name),
            Component::Prefix(_) => return None,
        }
    }
    out.is_absolute().then_some(out)
}

/// Where a debug directory keeps the debug file of build id `id` (at least 2 bytes):
/// `DIR/.build-id/xx/rest.debug`.
fn build_id_path(dir: &Path, id: &[u8]) -> PathBuf {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(".build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]))
}

/// How a candidate debug file is recognised as the file's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// Its build id is this.
    BuildId(Vec<u8>),
    /// Its CRC-32 is this (and its build id, when both files have one, the file's).
    Crc(u32, Option<Vec<u8>>),
}

/// The function symbols of the first candidate debug file that exists and passes its
/// check. Candidates that exist but fail are said in `notes`.
pub fn find_debug_symbols(
    path: &Path,
    refs: &DebugRefs,
    dirs: &DebugDirs,
    notes: &mut Vec<String>,
) -> Option<(PathBuf, Vec<Symbol>)> {
    for (candidate, check) in candidates(path, refs, dirs) {
        match read_debug_file(&candidate, &check) {
            Ok(Some(symbols)) => return Some((candidate, symbols)),
            Ok(None) => {}
            Err(err) => notes.push(format!(
                "{}: debug file for {} not used: {err}",
                candidate.display(),
                path.display()
            )),
        }
    }
    None
}

/// Opens a candidate: `Ok(None)` when there is none.
fn read_debug_file(path: &Path, check: &Check) -> Result<Option<Vec<Symbol>>, DebugInfoError> {
    let Some(cache) = open_debug_file(path, check)? else {
        return Ok(None);
    };
    let elf = ElfFile64::<Endianness, _>::parse(&cache)
        .map_err(|e| DebugInfoError::Elf(e.to_string()))?;
    symbols_of(&elf).map(Some)
}

/// Opens a candidate debug file (or dwz's supplementary file) to read parts of it, by
/// [`open_outside`]'s rule, once it passes `check`; `Ok(None)` when there is none.
pub fn open_debug_file(
    path: &Path,
    check: &Check,
) -> Result<Option<ReadCache<File>>, DebugInfoError> {
    let file = match open_outside(path) {
        Ok(file) => file,
        Err(OpenError::Io(err)) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    if let Check::Crc(expected, _) = check {
        let found = crc32_of(&file)?;
        if found != *expected {
            return Err(DebugInfoError::Crc {
                found,
                expected: *expected,
            });
        }
    }
    let cache = ReadCache::new(file);
    let elf = ElfFile64::<Endianness, _>::parse(&cache)
        .map_err(|e| DebugInfoError::Elf(e.to_string()))?;
    let id = elf.build_id().ok().flatten();
    match check {
        Check::BuildId(expected) if id != Some(expected.as_slice()) => {
            return Err(DebugInfoError::BuildId);
        }
        Check::Crc(_, Some(expected)) if id.is_some_and(|id| id != expected.as_slice()) => {
            return Err(DebugInfoError::BuildId);
        }
        _ => {}
    }
    drop(elf);
    Ok(Some(cache))
}

/// The CRC-32 (as `.gnu_debuglink` has it: zlib's) of a whole file, read in pieces.
fn crc32_of(mut file: &File) -> std::io::Result<u32> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    use std::io::Seek as _;
    file.seek(std::io::SeekFrom::Start(0))?;
    Ok(hasher.finalize())
}

/// The function symbols of `.symtab` of a parsed debug file ([`table_symbols`]; a symbol
/// whose section ends nowhere past it covers one byte).
fn symbols_of<'data, R: object::ReadRef<'data>>(
    elf: &ElfFile64<'data, Endianness, R>,
) -> Result<Vec<Symbol>, DebugInfoError> {
    table_symbols(elf, SHT_SYMTAB, |address| address.saturating_add(1)).map_err(|e| match e {
        TableError::TooLarge => DebugInfoError::SymtabTooLarge,
        TableError::Malformed(reason) => DebugInfoError::Elf(reason),
    })
}

/// The function symbols of a MiniDebugInfo section (`.gnu_debugdata`'s bytes: an xz stream
/// of an ELF file), decompressed to at most [`MINI_DEBUGINFO_MAX_BYTES`].
pub fn mini_debuginfo_symbols(compressed: &[u8]) -> Result<Vec<Symbol>, DebugInfoError> {
    let image = xz_decompress(compressed, MINI_DEBUGINFO_MAX_BYTES)?;
    let elf = ElfFile64::<Endianness>::parse(image.as_slice())
        .map_err(|e| DebugInfoError::Elf(e.to_string()))?;
    symbols_of(&elf)
}

/// The `.gnu_debugdata` section of a parsed file, if it has one.
pub fn gnu_debugdata<'data, R: object::ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
) -> Option<&'data [u8]> {
    file.section_by_name(".gnu_debugdata")?.data().ok()
}

/// Decompresses an xz stream, refusing more than `max_bytes` of output and decoder memory
/// beyond what a dictionary of that size needs.
pub fn xz_decompress(compressed: &[u8], max_bytes: u64) -> Result<Vec<u8>, DebugInfoError> {
    // liblzma's own limit on the decoder's memory (its dictionary and state).
    let stream = xz2::stream::Stream::new_stream_decoder(max_bytes.saturating_add(16 << 20), 0)
        .map_err(|e| DebugInfoError::Xz(e.to_string()))?;
    let mut decoder = xz2::read::XzDecoder::new_stream(compressed, stream);
    let mut out = Vec::new();
    (&mut decoder)
        .take(max_bytes + 1)
        .read_to_end(&mut out)
        .map_err(|e| DebugInfoError::Xz(e.to_string()))?;
    if out.len() as u64 > max_bytes {
        return Err(DebugInfoError::TooLarge);
    }
    Ok(out)
}

/// The function symbols of a file beyond its own `.symtab`, and where they came from: a
/// separate debug file, else MiniDebugInfo. `notes` gets a line per debug file refused.
pub fn extra_symbols<'data, R: object::ReadRef<'data>>(
    path: &Path,
    file: &ElfFile64<'data, Endianness, R>,
    dirs: &DebugDirs,
    notes: &mut Vec<String>,
) -> (Vec<Symbol>, SymbolSource) {
    let refs = DebugRefs::of(file);
    if let Some((found, symbols)) = find_debug_symbols(path, &refs, dirs, notes)
        && !symbols.is_empty()
    {
        return (symbols, SymbolSource::DebugFile(found));
    }
    if let Some(compressed) = gnu_debugdata(file) {
        match mini_debuginfo_symbols(compressed) {
            Ok(symbols) if !symbols.is_empty() => return (symbols, SymbolSource::MiniDebugInfo),
            Ok(_) => {}
            Err(err) => notes.push(format!(
                "{}: MiniDebugInfo (.gnu_debugdata) not used: {err}",
                path.display()
            )),
        }
    }
    (Vec::new(), SymbolSource::DynamicOnly)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_supplementary_file_is_looked_for_by_build_id_and_by_its_path_only_in_debug_dirs() {
        let dirs = DebugDirs(vec![PathBuf::from("/dbg"), PathBuf::from("/usr/lib/debug")]);
        let link = |path: &str| AltLink {
            path: PathBuf::from(path),
            build_id: vec![0xab, 0xcd, 0xef],
        };
        let debug_file = Path::new("/usr/lib/debug/usr/bin/tool.debug");
        let by_id = [
            "/dbg/.build-id/ab/cdef.debug",
            "/usr/lib/debug/.build-id/ab/cdef.debug",
        ];
        let found = |l: AltLink| -> Vec<String> {
            l.candidates(debug_file, &dirs)
                .iter()
                .map(|p| p.display().to_string())
                .collect()
        };
        // Debian: an absolute path under /usr/lib/debug, looked up under each debug dir.
        assert_eq!(
            found(link("/usr/lib/debug/.dwz/x86_64-linux-gnu/tool.debug"))[2..],
            [
                "/dbg/.dwz/x86_64-linux-gnu/tool.debug",
                "/usr/lib/debug/.dwz/x86_64-linux-gnu/tool.debug"
            ]
        );
        // Fedora: relative to the debug file's folder (then as above).
        assert_eq!(
            found(link("../../.dwz/tool-1.0"))[2..],
            ["/dbg/.dwz/tool-1.0", "/usr/lib/debug/.dwz/tool-1.0"]
        );
        // Anywhere else only by build id: the path is outside data.
        for outside in [
            "/etc/shadow",
            "../../../../../etc/shadow",
            "/usr/lib/debug/../../etc/x",
        ] {
            assert_eq!(found(link(outside)), by_id, "{outside}");
        }
        assert_eq!(lexical(Path::new("/a/../../b")), None);
        assert_eq!(
            lexical(Path::new("/a/./b/../c")),
            Some(PathBuf::from("/a/c"))
        );
    }

    #[test]
    fn candidates_follow_gdbs_order_and_never_leave_the_folders() {
        let refs = DebugRefs {
            build_id: Some(vec![0xab, 0xcd, 0xef]),
            debuglink: Some(("gzip.debug".into(), 7)),
        };
        let dirs = DebugDirs(vec![PathBuf::from("/dbg1"), PathBuf::from("/dbg2")]);
        let found: Vec<PathBuf> = candidates(Path::new("/usr/bin/gzip"), &refs, &dirs)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        let expected = [
            "/dbg1/.build-id/ab/cdef.debug",
            "/dbg2/.build-id/ab/cdef.debug",
            "/usr/bin/gzip.debug",
            "/usr/bin/.debug/gzip.debug",
            "/dbg1/usr/bin/gzip.debug",
            "/dbg2/usr/bin/gzip.debug",
        ];
        assert_eq!(found, expected.map(PathBuf::from));
    }

    #[test]
    fn xz_output_is_capped_and_garbage_is_an_error() {
        // 1 MiB of zeros compresses to a few hundred bytes: decompressing it under a
        // smaller cap is refused, not allocated.
        let mut compressed = Vec::new();
        xz2::read::XzEncoder::new(&vec![0u8; 1 << 20][..], 6)
            .read_to_end(&mut compressed)
            .unwrap();
        assert!(compressed.len() < 4096);
        assert_eq!(xz_decompress(&compressed, 1 << 20).unwrap().len(), 1 << 20);
        assert!(matches!(
            xz_decompress(&compressed, 64 << 10),
            Err(DebugInfoError::TooLarge)
        ));
        assert!(xz_decompress(b"not xz at all", 1 << 20).is_err());
        assert!(mini_debuginfo_symbols(&compressed).is_err());
        assert!(mini_debuginfo_symbols(&[]).is_err());
    }

    #[test]
    fn a_debug_file_whose_crc_differs_is_refused_and_said() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let copy = dir.path().join("app.debug");
        std::fs::copy(&exe, &copy).unwrap();
        let right = crc32_of(&File::open(&copy).unwrap()).unwrap();
        let refs = |crc| DebugRefs {
            build_id: None,
            debuglink: Some(("app.debug".into(), crc)),
        };
        let app = dir.path().join("app");
        let dirs = DebugDirs(Vec::new());
        let mut notes = Vec::new();
        let (found, symbols) = find_debug_symbols(&app, &refs(right), &dirs, &mut notes).unwrap();
        assert_eq!(found, copy);
        assert!(
            symbols.iter().any(|s| &*s.raw == "main"),
            "{}",
            symbols.len()
        );
        assert!(notes.is_empty(), "{notes:?}");
        assert!(find_debug_symbols(&app, &refs(right ^ 1), &dirs, &mut notes).is_none());
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("CRC-32"), "{notes:?}");
        // A FIFO where the debug file should be: refused without blocking.
        let fifo = dir.path().join("fifo.debug");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo of a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let fifo_refs = DebugRefs {
            build_id: None,
            debuglink: Some(("fifo.debug".into(), 0)),
        };
        assert!(find_debug_symbols(&app, &fifo_refs, &dirs, &mut notes).is_none());
        assert!(notes[1].contains("not a regular file"), "{notes:?}");
    }
}
