//! Which probed functions may carry a return probe. A return probe replaces the return
//! address on the stack with the kernel's trampoline when the function is entered. That is
//! harmless for a function that was called and returns with `ret`, and harmful for the ones
//! below (each seen to break a program here):
//!
//! - the program's **entry point** (`_start`): the kernel jumps to it with `argc` where a
//!   return address would be, so the probe overwrites `argc` (a C program printed
//!   `argc=-8192`; a Rust program's `std::env::args` panicked with "capacity overflow");
//! - functions that **never return** (no `ret` in their code and no jump out of it: `exit`,
//!   `abort`, panics, `__cxa_throw`): a return probe can never fire, and unwinders that
//!   start from such a frame meet the trampoline instead of a return address;
//! - functions that **use their own return address** (`setjmp` saves it: a later `longjmp`
//!   jumps to the trampoline and the kernel kills the program with SIGILL), or **unwind from
//!   their own frame** (`_Unwind_RaiseException`: every C++ exception then terminates), or
//!   are **entered by a jump with no return address** on top of the stack (the lazy-binding
//!   resolver, the signal return trampoline). Machine code does not show these: a short list
//!   of names ([`ENTRY_ONLY_NAMES`]) does.
//!
//! Those get an entry probe only. One that never returns (or the entry point) still pushes
//! its frame at entry, so its time counts while it runs, as it would with a return probe
//! that never fires (the call never completes: `partial`). The others return, so a frame
//! without a return probe would never be popped: their calls are counted at entry, with no
//! time ([`EntryOnly::counts_entries`]).

use super::elf::{ElfInfo, Symbol};

/// Why a function gets an entry probe only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryOnly {
    /// The program's entry point: entered with no return address.
    EntryPoint,
    /// Its code has no `ret` and no jump out of it.
    NoReturn,
    /// Reads its own return address (setjmp family, vfork, getcontext).
    UsesReturnAddress,
    /// Unwinds the stack from its own frame (exceptions, backtraces).
    Unwinder,
    /// Entered by a jump with something else than a return address on the stack.
    NoReturnAddress,
}

impl EntryOnly {
    /// Whether its calls are counted at entry with no time (it returns, but no return probe
    /// would pop its frame); otherwise its frame is pushed at entry and timed while it runs.
    pub fn counts_entries(self) -> bool {
        !matches!(self, EntryOnly::EntryPoint | EntryOnly::NoReturn)
    }

    pub fn describe(self) -> &'static str {
        match self {
            EntryOnly::EntryPoint => {
                "the program's entry point (entered with argc, not a return address, on the stack)"
            }
            EntryOnly::NoReturn => "never returns (no `ret` in its code and no jump out of it)",
            EntryOnly::UsesReturnAddress => "uses its own return address (setjmp family)",
            EntryOnly::Unwinder => "unwinds the stack from its own frame",
            EntryOnly::NoReturnAddress => "entered by a jump, with no return address on the stack",
        }
    }
}

/// Functions that return normally as far as their code shows, yet must not get a return
/// probe, matched on the raw symbol name (glibc, libgcc, libstdc++, the dynamic loader).
pub const ENTRY_ONLY_NAMES: &[(&str, EntryOnly)] = &[
    ("_start", EntryOnly::EntryPoint),
    ("_dl_start_user", EntryOnly::EntryPoint),
    ("__libc_start_main", EntryOnly::NoReturn),
    ("setjmp", EntryOnly::UsesReturnAddress),
    ("_setjmp", EntryOnly::UsesReturnAddress),
    ("__setjmp", EntryOnly::UsesReturnAddress),
    ("sigsetjmp", EntryOnly::UsesReturnAddress),
    ("__sigsetjmp", EntryOnly::UsesReturnAddress),
    ("getcontext", EntryOnly::UsesReturnAddress),
    ("__getcontext", EntryOnly::UsesReturnAddress),
    ("swapcontext", EntryOnly::UsesReturnAddress),
    ("__swapcontext", EntryOnly::UsesReturnAddress),
    ("vfork", EntryOnly::UsesReturnAddress),
    ("__vfork", EntryOnly::UsesReturnAddress),
    ("longjmp", EntryOnly::NoReturn),
    ("_longjmp", EntryOnly::NoReturn),
    ("siglongjmp", EntryOnly::NoReturn),
    ("__longjmp_chk", EntryOnly::NoReturn),
    ("__libc_longjmp", EntryOnly::NoReturn),
    ("__libc_siglongjmp", EntryOnly::NoReturn),
    ("setcontext", EntryOnly::NoReturn),
    ("__setcontext", EntryOnly::NoReturn),
    ("__start_context", EntryOnly::NoReturnAddress),
    ("__restore_rt", EntryOnly::NoReturnAddress),
    ("_dl_runtime_resolve", EntryOnly::NoReturnAddress),
    ("_dl_runtime_resolve_xsave", EntryOnly::NoReturnAddress),
    ("_dl_runtime_resolve_xsavec", EntryOnly::NoReturnAddress),
    ("_dl_runtime_resolve_fxsave", EntryOnly::NoReturnAddress),
    ("_dl_runtime_profile", EntryOnly::NoReturnAddress),
    ("_dl_runtime_profile_avx", EntryOnly::NoReturnAddress),
    ("_dl_runtime_profile_avx512", EntryOnly::NoReturnAddress),
    ("_dl_runtime_profile_sse", EntryOnly::NoReturnAddress),
    ("_Unwind_RaiseException", EntryOnly::Unwinder),
    ("_Unwind_Resume", EntryOnly::Unwinder),
    ("_Unwind_Resume_or_Rethrow", EntryOnly::Unwinder),
    ("_Unwind_ForcedUnwind", EntryOnly::Unwinder),
    ("_Unwind_Backtrace", EntryOnly::Unwinder),
    ("__cxa_throw", EntryOnly::Unwinder),
    ("__cxa_rethrow", EntryOnly::Unwinder),
    ("backtrace", EntryOnly::Unwinder),
    ("__backtrace", EntryOnly::Unwinder),
];

/// Whether a file unwinds its stack through its callers' frames: C++ exceptions (it links
/// the C++ runtime, or holds its throw function: a static build) or Rust panics (it holds
/// the panic runtime's `rust_panic`, or links libgcc_s, which provides the unwinder to C
/// code that otherwise never needs it). An unwind through a function that has a return
/// probe pending meets the kernel's trampoline instead of a return address and terminates
/// the program; nothing on the probe side can prevent that, so cg-trace says so.
pub fn unwinds(elf: &ElfInfo) -> bool {
    elf.needed.iter().any(|n| {
        n.starts_with("libstdc++") || n.starts_with("libc++.") || n.starts_with("libgcc_s.")
    }) || elf.functions.iter().any(|f| {
        matches!(
            &*f.raw,
            "__cxa_throw" | "rust_panic" | "__rust_start_panic" | "_Unwind_RaiseException"
        )
    })
}

/// Most bytes of one function decoded (a longer one is judged on its first part).
const MAX_CODE_BYTES: usize = 1 << 20;

/// Whether `elf.functions[index]` may get a return probe; `image` is the whole file.
pub fn entry_only(elf: &ElfInfo, image: &[u8], index: usize) -> Option<EntryOnly> {
    let symbol = elf.functions.get(index)?;
    if elf.entry != 0 && symbol.address == elf.entry {
        return Some(EntryOnly::EntryPoint);
    }
    if let Some((_, why)) = ENTRY_ONLY_NAMES.iter().find(|(n, _)| **n == *symbol.raw) {
        return Some(*why);
    }
    if elf.machine != object::elf::EM_X86_64 {
        return None;
    }
    let end = function_end(elf, index)?;
    let code = elf.code(image, symbol.address, end.saturating_sub(symbol.address))?;
    (!x86_64_may_return(code, symbol.address)).then_some(EntryOnly::NoReturn)
}

/// Where a function's code ends: its size, or else the next symbol's address (never past
/// its segment, at most [`MAX_CODE_BYTES`]). `None` when that cannot be told.
fn function_end(elf: &ElfInfo, index: usize) -> Option<u64> {
    let symbol: &Symbol = &elf.functions[index];
    let end = if symbol.size > 0 {
        symbol.address.checked_add(symbol.size)?
    } else {
        elf.functions[index + 1..]
            .iter()
            .map(|f| f.address)
            .find(|&a| a > symbol.address)?
    };
    Some(end.min(symbol.address.saturating_add(MAX_CODE_BYTES as u64)))
}

/// Whether x86-64 `code` (loaded at `address`) may return to its caller: it has a `ret`, or
/// leaves its own bytes by a jump (a tail call: the callee returns for it), or cannot be
/// decoded (then assume it may). Only code that provably never leaves but by a call that
/// does not come back (or `hlt`, `ud2`, a `syscall` that ends the thread) says no.
pub fn x86_64_may_return(code: &[u8], address: u64) -> bool {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind};
    let end = address.saturating_add(code.len() as u64);
    let inside = |target: u64| target >= address && target < end;
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    while decoder.can_decode() {
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            return true;
        }
        match instruction.mnemonic() {
            Mnemonic::Ret | Mnemonic::Retf | Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq => {
                return true;
            }
            _ => {}
        }
        let direct_branch = matches!(
            instruction.op0_kind(),
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
        );
        match instruction.mnemonic() {
            Mnemonic::Call | Mnemonic::Xbegin => {}
            // A jump table stays inside, a jump through a pointer leaves: cannot tell.
            Mnemonic::Jmp | Mnemonic::Jmpe if !direct_branch => return true,
            // jmp, jcc, loop, jrcxz to a target outside: a tail call.
            _ if direct_branch && !inside(instruction.near_branch_target()) => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_with_a_ret_or_a_jump_out_returns() {
        // push rbp; mov rbp,rsp; pop rbp; ret
        assert!(x86_64_may_return(
            &[0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3],
            0x1000
        ));
        // sub rsp,8; jmp 0x2000 (a tail call out of the function)
        let tail = [0x48, 0x83, 0xec, 0x08, 0xe9, 0xf7, 0x0f, 0x00, 0x00];
        assert!(x86_64_may_return(&tail, 0x1000));
        // jmp rax (a jump table or a call through a pointer)
        assert!(x86_64_may_return(&[0xff, 0xe0], 0x1000));
    }

    #[test]
    fn code_that_cannot_leave_never_returns() {
        // glibc's _start: endbr64; xor ebp,ebp; mov r9,rdx; pop rsi; mov rdx,rsp;
        // and rsp,-16; push rax; push rsp; xor r8d,r8d; xor ecx,ecx;
        // mov rdi,[rip+x]; call [rip+y]; hlt
        let start = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e, 0x48, 0x89, 0xe2, 0x48,
            0x83, 0xe4, 0xf0, 0x50, 0x54, 0x45, 0x31, 0xc0, 0x31, 0xc9, 0x48, 0x8b, 0x3d, 0x10,
            0x20, 0x00, 0x00, 0xff, 0x15, 0x12, 0x20, 0x00, 0x00, 0xf4,
        ];
        assert!(!x86_64_may_return(&start, 0x1040));
        // __restore_rt: mov rax,15; syscall
        assert!(!x86_64_may_return(
            &[0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05],
            0x1000
        ));
        // a loop that only jumps back into itself: nop; jmp -3
        assert!(!x86_64_may_return(&[0x90, 0xeb, 0xfd], 0x1000));
        // a byte 0xc3 inside an immediate is not a ret: mov eax,0xc3; call x; ud2
        assert!(!x86_64_may_return(
            &[
                0xb8, 0xc3, 0x00, 0x00, 0x00, 0xe8, 0x00, 0x01, 0x00, 0x00, 0x0f, 0x0b
            ],
            0x1000
        ));
    }

    #[test]
    fn files_whose_exceptions_or_panics_unwind_are_known() {
        // This test binary is Rust built with panic=unwind.
        let exe = std::env::current_exe().unwrap();
        let mut elf = ElfInfo::open(&exe).unwrap();
        assert!(unwinds(&elf), "a Rust test binary: {:?}", elf.needed);
        // A C file that links neither runtime nor unwinder does not.
        elf.functions.retain(|f| {
            !matches!(
                &*f.raw,
                "rust_panic" | "__rust_start_panic" | "_Unwind_RaiseException"
            )
        });
        elf.needed.retain(|n| !n.starts_with("libgcc_s."));
        assert!(!unwinds(&elf), "{:?}", elf.needed);
        elf.needed.push("libstdc++.so.6".into());
        assert!(unwinds(&elf));
    }

    #[test]
    fn the_entry_point_and_listed_names_are_entry_only_and_main_is_not() {
        let exe = std::env::current_exe().unwrap();
        let image = std::fs::read(&exe).unwrap();
        let elf = ElfInfo::parse(&exe, &image, &[]).unwrap();
        let index = |raw: &str| elf.functions.iter().position(|f| &*f.raw == raw).unwrap();
        assert_eq!(
            entry_only(&elf, &image, index("_start")),
            Some(EntryOnly::EntryPoint)
        );
        assert_eq!(entry_only(&elf, &image, index("main")), None);
        let unwrap_failed = elf
            .functions
            .iter()
            .position(|f| f.name() == "core::option::unwrap_failed");
        if let Some(i) = unwrap_failed {
            assert_eq!(entry_only(&elf, &image, i), Some(EntryOnly::NoReturn));
        }
    }
}
