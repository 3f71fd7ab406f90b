//! Finds CPython in a process and tells the sampler's frame walker where to look: the address
//! of `_PyRuntime` in that process and the offsets of the fields it follows, for the
//! interpreter's version.
//!
//! | version | Python frames | how the offsets are known |
//! |---|---|---|
//! | 3.11 | yes | table below, checked against Debian's 3.11.2 and pyenv's 3.11.7 |
//! | 3.12 | yes | table below, checked against pyenv's 3.12.1 |
//! | 3.13 | yes | the interpreter's own `_Py_DebugOffsets` (table below as a fallback) |
//! | others | no (native frames only) | |
//!
//! The tables were measured on this project's machines by reading the live structures of
//! each interpreter (`ctypes`), not copied from headers; builds with unusual options
//! (debug builds, free threading) are not supported.

use std::{
    collections::HashMap,
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use cg_common::profiling::{PY_NO_CFRAME, PyProcess};

use super::{elf::ElfInfo, maps::ProcMaps};

/// A CPython process found.
#[derive(Clone, Debug, PartialEq)]
pub struct PythonProcess {
    pub walker: PyProcess,
    /// The file holding the interpreter (the executable or `libpython3.X.so`): its native
    /// frames are the interpreter's own and hide behind the Python frames.
    pub interpreter: PathBuf,
    pub version: (u32, u32),
}

/// What looking for CPython in a process found.
#[derive(Clone, Debug, PartialEq)]
pub enum Detection {
    Python(PythonProcess),
    /// CPython, but a version the walker does not know.
    Unsupported {
        version: (u32, u32),
        interpreter: PathBuf,
    },
    NotPython,
}

/// Offsets for one version (see the module docs for where they come from).
fn table(version: (u32, u32)) -> Option<PyProcess> {
    let base =
        |interp_head, threads_head, native_tid, frame, cframe, code, previous, owner| PyProcess {
            runtime_addr: 0,
            interp_head,
            threads_head,
            tstate_next: 8,
            tstate_native_tid: native_tid,
            tstate_frame: frame,
            cframe_frame: cframe,
            frame_code: code,
            frame_previous: previous,
            frame_owner: owner,
            code_qualname: 128,
            code_filename: 112,
            code_firstlineno: 68,
            unicode_ascii_data: 40,
            version: (version.0 << 8) | version.1,
        };
    match version {
        (3, 11) => Some(PyProcess {
            code_firstlineno: 72,
            unicode_ascii_data: 48,
            ..base(40, 16, 160, 56, 8, 32, 48, 69)
        }),
        (3, 12) => Some(base(40, 72, 144, 56, 0, 0, 8, 70)),
        (3, 13) => Some(base(632, 7344, 160, 72, PY_NO_CFRAME, 0, 8, 70)),
        _ => None,
    }
}

/// Interpreter files already read, shared by every process of a run (only their symbols
/// and segments are kept).
#[derive(Default)]
pub struct InterpreterCache {
    files: HashMap<PathBuf, Option<Arc<ElfInfo>>>,
}

/// Looks for CPython in process `pid`: a mapped `libpython3*`, or an executable whose name
/// says python (Debian's `/usr/bin/python3.11` links the interpreter statically). Other
/// processes cost one read of their memory map.
pub fn detect(proc_root: &Path, pid: u32, cache: &mut InterpreterCache) -> Detection {
    let Ok(maps) = ProcMaps::read(proc_root, pid) else {
        return Detection::NotPython;
    };
    let exe = std::fs::read_link(proc_root.join(pid.to_string()).join("exe")).ok();
    let named = |p: &Path, prefix: &str| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
    };
    let candidates: Vec<PathBuf> = maps
        .files()
        .into_iter()
        .map(|p| p.as_ref().clone())
        .filter(|p| (Some(p) == exe.as_ref() && named(p, "python")) || named(p, "libpython3"))
        .collect();
    for file in candidates {
        let elf = cache
            .files
            .entry(file.clone())
            .or_insert_with(|| {
                ElfInfo::open_with(&file, &["_PyRuntime", "Py_Version"])
                    .ok()
                    .map(Arc::new)
            })
            .clone();
        let Some(elf) = elf else {
            continue;
        };
        let Some((runtime_vaddr, _)) = elf.data_symbol("_PyRuntime") else {
            continue;
        };
        let version = elf
            .data_symbol("Py_Version")
            .and_then(|(_, bytes)| bytes.get(..4))
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .map(|v| (v >> 24, (v >> 16) & 0xff))
            .or_else(|| version_from_name(&file));
        let Some(version) = version else { continue };
        let Some(runtime_addr) = runtime_address(&elf, &maps, &file, runtime_vaddr) else {
            continue;
        };
        let Some(mut walker) = table(version) else {
            return Detection::Unsupported {
                version,
                interpreter: file,
            };
        };
        walker.runtime_addr = runtime_addr;
        if version >= (3, 13) {
            apply_debug_offsets(proc_root, pid, &mut walker);
        }
        return Detection::Python(PythonProcess {
            walker,
            interpreter: file,
            version,
        });
    }
    Detection::NotPython
}

/// A Python function as its code object names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFunction {
    pub qualname: String,
    pub filename: String,
    pub line: u32,
}

/// Reads a code object's qualified name, file name and first line from process `pid`'s
/// memory (the sampler records code objects by address only).
pub fn read_code(proc_root: &Path, pid: u32, walker: &PyProcess, code: u64) -> Option<PyFunction> {
    let mem = std::fs::File::open(proc_root.join(pid.to_string()).join("mem")).ok()?;
    let u64_at = |address: u64| -> Option<u64> {
        let mut b = [0u8; 8];
        mem.read_exact_at(&mut b, address).ok()?;
        Some(u64::from_le_bytes(b))
    };
    // The address comes from the target's memory: a field past 2^64 is not there.
    let field = |offset: u32| code.checked_add(u64::from(offset));
    let mut line = [0u8; 4];
    mem.read_exact_at(&mut line, field(walker.code_firstlineno)?)
        .ok()?;
    let text = |object: u64| -> Option<String> { read_str(&mem, walker, object) };
    let qualname = text(u64_at(field(walker.code_qualname)?)?)?;
    let filename = text(u64_at(field(walker.code_filename)?)?)?;
    Some(PyFunction {
        qualname,
        filename,
        line: u32::try_from(i32::from_le_bytes(line)).unwrap_or(0),
    })
}

/// A compact `str` object's text (3.11 to 3.13 layouts).
fn read_str(mem: &std::fs::File, walker: &PyProcess, object: u64) -> Option<String> {
    // PyASCIIObject: ob_refcnt, ob_type, length, hash, state (interned:2, kind:3,
    // compact:1, ascii:1, ...), then the characters of a compact ASCII string; a compact
    // non-ASCII string has a few more fields first.
    let mut header = [0u8; 40];
    mem.read_exact_at(&mut header, object).ok()?;
    let length = usize::try_from(u64::from_le_bytes(header[16..24].try_into().ok()?)).ok()?;
    let state = u32::from_le_bytes(header[32..36].try_into().ok()?);
    let (kind, compact, ascii) = (
        (state >> 2) & 7,
        state & (1 << 5) != 0,
        state & (1 << 6) != 0,
    );
    if !compact || length > 4096 {
        return None;
    }
    let ascii_data = u64::from(walker.unicode_ascii_data);
    let data = if ascii {
        ascii_data
    } else if walker.version == 0x030b {
        ascii_data + 24
    } else {
        ascii_data + 16
    };
    let width = match (ascii, kind) {
        (true, _) | (false, 1) => 1,
        (false, 2) => 2,
        (false, 4) => 4,
        _ => return None,
    };
    let mut bytes = vec![0u8; length * width];
    mem.read_exact_at(&mut bytes, object + data).ok()?;
    Some(match width {
        1 => bytes.iter().map(|&b| char::from(b)).collect(),
        2 => bytes
            .chunks_exact(2)
            .map(|c| char::from_u32(u32::from(u16::from_le_bytes([c[0], c[1]]))).unwrap_or('?'))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('?'))
            .collect(),
    })
}

/// Where `_PyRuntime` is in the process: the file's load bias plus the symbol's address.
fn runtime_address(elf: &ElfInfo, maps: &ProcMaps, file: &Path, vaddr: u64) -> Option<u64> {
    if !elf.relocatable {
        return Some(vaddr);
    }
    // The bias is where the file's first page went minus its first segment's page; a
    // mapping by file offset alone is ambiguous (two segments may share a file page).
    let first_page = elf.segments.iter().map(|s| s.vaddr).min()? & !0xfff;
    let first_mapping = maps
        .mappings
        .iter()
        .filter(|m| m.offset == 0 && m.path.as_deref().map(PathBuf::as_path) == Some(file))
        .map(|m| m.start)
        .min()?;
    Some(first_mapping.wrapping_sub(first_page).wrapping_add(vaddr))
}

/// `python3.11`, `libpython3.12.so.1.0` -> (3, 11), (3, 12).
fn version_from_name(file: &Path) -> Option<(u32, u32)> {
    let name = file.file_name()?.to_string_lossy().into_owned();
    let rest = &name[name.find("python3.")? + "python3.".len()..];
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((3, minor.parse().ok()?))
}

/// CPython 3.13 starts `_PyRuntime` with `_Py_DebugOffsets` (cookie `xdebugpy`): use the
/// interpreter's own offsets where it gives them.
fn apply_debug_offsets(proc_root: &Path, pid: u32, walker: &mut PyProcess) {
    let Ok(mem) = std::fs::File::open(proc_root.join(pid.to_string()).join("mem")) else {
        return;
    };
    let mut raw = [0u8; 8 * 48];
    if mem.read_exact_at(&mut raw, walker.runtime_addr).is_err() || &raw[..8] != b"xdebugpy" {
        return;
    }
    let field = |index: usize| -> Option<u32> {
        let bytes = raw.get(8 * index..8 * index + 8)?;
        u32::try_from(u64::from_le_bytes(bytes.try_into().ok()?)).ok()
    };
    // Layout of 3.13's _Py_DebugOffsets, in u64 fields after the cookie: version,
    // free_threaded, runtime_state {size, finalizing, interpreters_head}, interpreter_state
    // {size, id, next, threads_head, ...13 fields}, thread_state {size, prev, next, interp,
    // current_frame, thread_id, native_thread_id, ...9}, interpreter_frame {size, previous,
    // executable, instr_ptr, localsplus, owner}, code_object {size, filename, name, qualname,
    // linetable, firstlineno, ...}.
    let version = field(1).unwrap_or(0);
    if version >> 16 != 0x030d {
        return;
    }
    let mut fields = [
        (&mut walker.interp_head, 5),
        (&mut walker.threads_head, 9),
        (&mut walker.tstate_next, 21),
        (&mut walker.tstate_frame, 23),
        (&mut walker.tstate_native_tid, 25),
        (&mut walker.frame_previous, 29),
        (&mut walker.frame_code, 30),
        (&mut walker.frame_owner, 33),
        (&mut walker.code_filename, 35),
        (&mut walker.code_qualname, 37),
        (&mut walker.code_firstlineno, 39),
    ];
    // All or nothing: a value that makes no sense means our reading of the layout is off.
    let values: Vec<Option<u32>> = fields.iter().map(|(_, i)| field(*i)).collect();
    if values.iter().all(|v| v.is_some_and(|v| v < 65_536)) {
        for ((slot, _), value) in fields.iter_mut().zip(values) {
            **slot = value.unwrap_or(**slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A code object at the top of the address space (the `python_process` fuzz target's
    /// seed with its address set to 2^64 - 1): its field addresses overflowed.
    #[test]
    fn a_code_object_at_the_top_of_the_address_space_is_not_read() {
        let input =
            include_bytes!("../../../fuzz/regressions/python_process/code-object-at-u64-max");
        let code = u64::from_le_bytes(input[9..17].try_into().unwrap());
        let elf_len = usize::from(u16::from_le_bytes([input[17], input[18]]));
        let mem = &input[19 + elf_len..];
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("4242")).unwrap();
        let walker = table((3, 12)).unwrap();
        std::fs::write(dir.path().join("4242/mem"), mem).unwrap();
        assert_eq!(read_code(dir.path(), 4242, &walker, code), None);
        // The seed's code object, at 0x400, reads.
        assert_eq!(
            read_code(dir.path(), 4242, &walker, 0x400).map(|f| (f.qualname, f.line)),
            Some(("Worker.heavy".to_string(), 42))
        );
    }

    #[test]
    fn versions_from_file_names() {
        assert_eq!(
            version_from_name(Path::new("/usr/bin/python3.11")),
            Some((3, 11))
        );
        assert_eq!(
            version_from_name(Path::new("/x/libpython3.12.so.1.0")),
            Some((3, 12))
        );
        assert_eq!(version_from_name(Path::new("/usr/bin/perl")), None);
    }

    #[test]
    fn tables_cover_3_11_to_3_13_only() {
        assert_eq!(table((3, 11)).unwrap().frame_code, 32);
        assert_eq!(table((3, 12)).unwrap().cframe_frame, 0);
        assert_eq!(table((3, 13)).unwrap().cframe_frame, PY_NO_CFRAME);
        assert!(table((3, 10)).is_none());
        assert!(table((3, 14)).is_none());
    }

    #[test]
    fn this_process_is_not_python() {
        let mut cache = InterpreterCache::default();
        assert_eq!(
            detect(Path::new("/proc"), std::process::id(), &mut cache),
            Detection::NotPython
        );
    }
}
