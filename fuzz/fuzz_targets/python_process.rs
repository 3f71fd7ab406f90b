//! Finding CPython in a process and reading its code objects: the interpreter's ELF file
//! (`_PyRuntime`, `Py_Version`), the process's memory map, `_Py_DebugOffsets` and code and
//! string objects in its memory. The input becomes a generated `/proc/PID` (a `maps` line
//! for the library, a `mem` file) and the library itself.
//!
//! Input: a byte choosing the library's name (its version when it has no `Py_Version`), the
//! mapping's start and a code object's address (u64, little-endian), the ELF file's length
//! (u16, little-endian), the ELF file, then the process's memory from address 0.
#![no_main]

use std::fs;

use cg_agent::functions::python::{Detection, InterpreterCache, detect, read_code};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 4] = [
    "libpython3.11.so.1.0",
    "libpython3.12.so",
    "libpython3.13.so",
    "libpython3.9.so",
];

fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

fuzz_target!(|data: &[u8]| {
    let (Some(&name), Some(start), Some(code), Some(elf_len)) = (
        data.first(),
        u64_at(data, 1),
        u64_at(data, 9),
        data.get(17..19)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]]))),
    ) else {
        return;
    };
    let rest = &data[19..];
    let elf = &rest[..elf_len.min(rest.len())];
    let mem = &rest[elf.len()..];

    let dir = cg_trace_fuzz::fresh_dir();
    let library = dir.join(NAMES[usize::from(name) % NAMES.len()]);
    fs::write(&library, elf).unwrap();
    let proc_root = dir.join("proc");
    let pid_dir = proc_root.join("4242");
    fs::create_dir_all(&pid_dir).unwrap();
    let end = start.saturating_add(0x10000);
    fs::write(
        pid_dir.join("maps"),
        format!(
            "{start:x}-{end:x} r-xp 00000000 fe:01 77 {}\n",
            library.display()
        ),
    )
    .unwrap();
    fs::write(pid_dir.join("mem"), mem).unwrap();

    let mut cache = InterpreterCache::default();
    let walker = match detect(&proc_root, 4242, &mut cache) {
        Detection::Python(python) => {
            assert!(
                [(3, 11), (3, 12), (3, 13)].contains(&python.version),
                "walker for version {:?}",
                python.version
            );
            assert_eq!(python.interpreter, library);
            python.walker
        }
        Detection::Unsupported { version, .. } => {
            assert!(![(3, 11), (3, 12), (3, 13)].contains(&version));
            return;
        }
        Detection::NotPython => return,
    };
    let offsets = [
        walker.interp_head,
        walker.threads_head,
        walker.tstate_next,
        walker.tstate_frame,
        walker.tstate_native_tid,
        walker.frame_previous,
        walker.frame_code,
        walker.frame_owner,
        walker.code_filename,
        walker.code_qualname,
        walker.code_firstlineno,
    ];
    assert!(
        offsets.iter().all(|&o| o < 65_536),
        "implausible offsets {walker:?}"
    );
    if let Some(function) = read_code(&proc_root, 4242, &walker, code) {
        assert!(function.qualname.chars().count() <= 4096);
        assert!(function.filename.chars().count() <= 4096);
    }
});
