//! Types shared by the function-level programs (uprobes on chosen functions, the stack
//! sampler and its CPython frame walker) and the agent. Same rules as the rest of this crate:
//! `#[repr(C)]`, `Copy`, no `bool`, no implicit padding, sizes asserted.

use core::mem::size_of;

/// Names of the maps of the function-level programs.
pub mod names {
    /// Hash: tid -> [`FuncThread`](super::FuncThread), the entry stack of each thread that
    /// entered a probed function.
    pub const FUNC_THREADS: &str = "FUNC_THREADS";
    /// Hash: [`FuncKey`](super::FuncKey) -> [`FuncStats`](super::FuncStats), cumulative per
    /// thread (a thread runs on one CPU at a time, so no atomics are needed).
    pub const FUNC_STATS: &str = "FUNC_STATS";
    /// Per-CPU array of one [`FuncCounters`](super::FuncCounters).
    pub const FUNC_COUNTERS: &str = "FUNC_COUNTERS";
    /// Ring buffer of [`SampleRecord`](super::SampleRecord)s: one per sample of a target,
    /// with its stacks; submitted without waking the agent, which drains it every interval.
    pub const SAMPLE_RING: &str = "SAMPLE_RING";
    /// Per-CPU array of one [`SamplerCounters`](super::SamplerCounters).
    pub const SAMPLER_COUNTERS: &str = "SAMPLER_COUNTERS";
    /// Hash: tgid -> [`PyProcess`](super::PyProcess), the CPython processes to walk.
    pub const PY_PROCS: &str = "PY_PROCS";
}

/// Globals of the function-level programs.
pub mod globals {
    /// `u32`: 1 makes `sched_switch` also record when each CPU's task got it
    /// (`CpuState::switch_in_ns`), which the function probes need to read a thread's
    /// on-CPU clock mid-slice. 0 (the default) leaves the hot path as it is.
    pub const FUNC_CLOCK: &str = "FUNC_CLOCK";
    /// `u32`: 1 makes the function probes return at once (benchmarks measure the cost of an
    /// empty uprobe + uretprobe pair this way).
    pub const NOOP_FUNC: &str = "NOOP_FUNC";
    /// `u32`: 1 makes the sampler also copy each sample's user registers and the top of its
    /// user stack ([`StackCopyRecord`](super::StackCopyRecord)), for the agent to unwind
    /// without frame pointers. 0 (the default): frame pointers only, records stay small.
    pub const STACK_COPY: &str = "STACK_COPY";
}

/// Entry frames kept per thread; deeper nesting of probed functions is counted, not timed.
pub const FUNC_MAX_DEPTH: usize = 32;
/// Threads that can be inside probed functions at once.
pub const FUNC_MAX_THREADS: u32 = 8_192;
/// (thread, function) pairs with statistics.
pub const FUNC_MAX_STATS: u32 = 32_768;

/// `FuncFrame::flags`: no enclosing frame of the same function (inclusive time counts here).
pub const FRAME_OUTERMOST: u32 = 1;

/// Bit of a function probe's BPF cookie (whose low 32 bits are the function id): the function
/// has an entry probe only, and returns (a return probe would harm it: it uses its own return
/// address, or unwinds), so no frame is pushed: its calls are counted at entry, with no time.
pub const COOKIE_ENTRY_ONLY: u64 = 1 << 32;

/// One active call of a probed function.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncFrame {
    /// Function id (the uprobe's cookie: an index into the agent's table of functions).
    pub func: u32,
    pub flags: u32,
    /// The thread's on-CPU clock at entry (nanoseconds of CPU time since the thread began).
    pub entry_ns: u64,
    /// On-CPU nanoseconds spent so far in completed calls of probed callees.
    pub child_ns: u64,
}
const _: () = assert!(size_of::<FuncFrame>() == 24);

/// A thread's own clock base, kept while its CPU's state names another task: a switch onto
/// this thread that tracing never reported (a Firecracker guest's agent thread leaves its CPU
/// without a `sched_switch` event). The scheduler's runtime read then (`runtime_ns`, exact up
/// to its last update) plus the time since (`at_ns`) is the thread's clock for as long as the
/// CPU's state stays as it was (`seq`, on `cpu`): any switch reported since would change it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockBase {
    /// The CPU plus 1 (0: no base).
    pub cpu: u32,
    pub _pad: u32,
    /// The CPU state's sequence number when the base was taken.
    pub seq: u64,
    pub runtime_ns: u64,
    /// CLOCK_MONOTONIC nanoseconds when it was read.
    pub at_ns: u64,
}
const _: () = assert!(size_of::<ClockBase>() == 32);

/// The entry stack of one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncThread {
    pub tgid: u32,
    /// Frames in use.
    pub depth: u32,
    /// Entries past [`FUNC_MAX_DEPTH`] still waiting for their return.
    pub overflow: u32,
    pub _pad: u32,
    pub frames: [FuncFrame; FUNC_MAX_DEPTH],
    pub clock: ClockBase,
}
const _: () = assert!(size_of::<FuncThread>() == 16 + 24 * FUNC_MAX_DEPTH + 32);

impl Default for FuncThread {
    fn default() -> Self {
        FuncThread {
            tgid: 0,
            depth: 0,
            overflow: 0,
            _pad: 0,
            frames: [FuncFrame::default(); FUNC_MAX_DEPTH],
            clock: ClockBase::default(),
        }
    }
}

/// A probed function in one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncKey {
    pub tgid: u32,
    pub tid: u32,
    pub func: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<FuncKey>() == 16);

/// Cumulative figures of completed calls.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncStats {
    pub calls: u64,
    /// On-CPU ns of outermost calls (a recursive call's time counts once).
    pub incl_ns: u64,
    /// On-CPU ns in the function itself, not in probed callees.
    pub self_ns: u64,
}
const _: () = assert!(size_of::<FuncStats>() == 24);

/// What the function probes saw or could not record, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncCounters {
    /// Entry probe hits of every process (targets or not): what the probes cost the machine.
    pub entries: u64,
    /// Return probe hits of every process.
    pub returns: u64,
    /// Entries deeper than [`FUNC_MAX_DEPTH`] (counted, not timed).
    pub overflows: u64,
    /// Returns with no matching entry (attached mid-call, or lost to a longjmp).
    pub unmatched_returns: u64,
    /// Frames dropped because a return skipped them (longjmp, exceptions).
    pub abandoned_frames: u64,
    /// Threads or statistics the maps had no room for.
    pub map_full: u64,
    /// Clock reads that fell back to the scheduler's own runtime (exact up to its last
    /// update, which may be a tick old): the CPU's state named another task (a switch tracing
    /// did not report; the thread then keeps a clock base of its own, see [`ClockBase`]), or
    /// the read raced a context switch twice.
    pub clock_fallbacks: u64,
    pub _reserved: u64,
}
const _: () = assert!(size_of::<FuncCounters>() == 64);

/// Bytes of the sample ring buffer when the agent does not size it to the sample rate (it
/// does, at load).
pub const SAMPLE_RING_BYTES: u32 = 1 << 20;
/// Addresses kept per stack (perf's default `kernel.perf_event_max_stack`); deeper stacks
/// keep their innermost frames.
pub const STACK_MAX_DEPTH: usize = 127;

/// One sample of a target thread, as the kernel hands it over: the thread, and its kernel,
/// user and Python stacks, innermost first. The kernel writes the stacks straight into the
/// ring buffer, so nothing is hashed, compared or copied per sample; the agent keys stacks by
/// content. Fixed size, so that the program reserves it in one step.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleRecord {
    pub tgid: u32,
    pub tid: u32,
    /// Bytes of `kernel` in use; 0: no kernel stack (the sample hit user mode); negative:
    /// the kernel could not walk it (an errno).
    pub kernel_bytes: i32,
    /// Bytes of `user` in use; 0: no user stack (a kernel thread); negative: an errno.
    pub user_bytes: i32,
    /// Python frames in `py_codes` (0: not a CPython process the walker knows, or none).
    pub py_len: u32,
    /// 1 when the Python walk stopped at [`PY_MAX_FRAMES`] with frames left.
    pub py_truncated: u32,
    /// Code object addresses of the Python frames (0: a frame with no code of its own).
    pub py_codes: [u64; PY_MAX_FRAMES],
    pub kernel: [u64; STACK_MAX_DEPTH],
    pub user: [u64; STACK_MAX_DEPTH],
}
const _: () = assert!(size_of::<SampleRecord>() == 24 + 8 * PY_MAX_FRAMES + 16 * STACK_MAX_DEPTH);

/// Bytes of user stack copied per sample when [`globals::STACK_COPY`] is set. Measured:
/// from a sampled leaf to the very top of the main thread's stack (its start-up frames,
/// then the environment) the copy held 9-10 KiB in the unwinding test programs and `xz -9`;
/// perf's `--call-graph dwarf` copies 8 KiB by default. 16 KiB leaves room for deeper or
/// larger frames while keeping a record under 19 KB.
pub const STACK_COPY_BYTES: usize = 16 * 1024;
/// The stack is copied in pieces of this many bytes, from an address aligned to it: the top
/// of a stack is page-aligned, so the copy stops exactly there (a piece that would cross it
/// fails alone) instead of failing whole.
pub const STACK_COPY_CHUNK: usize = 1024;

/// A sample with the copy of its user stack: what [`SampleRecord`] holds, plus the user
/// registers an unwinder starts from and the bytes of the stack from `stack_base` up.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackCopyRecord {
    pub sample: SampleRecord,
    /// User instruction, stack and frame pointers (x86-64 `ip`, `sp`, `bp`) when the thread
    /// was interrupted or entered the kernel.
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Address of `stack[0]`: `sp` rounded down to [`STACK_COPY_CHUNK`].
    pub stack_base: u64,
    /// Bytes of `stack` copied (0: none could be read).
    pub stack_bytes: u32,
    pub _pad: u32,
    pub stack: [u8; STACK_COPY_BYTES],
}
const _: () =
    assert!(size_of::<StackCopyRecord>() == size_of::<SampleRecord>() + 40 + STACK_COPY_BYTES);

/// Sampler counters, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerCounters {
    /// Samples of targets taken.
    pub samples: u64,
    /// Samples lost whole: the ring buffer was full (the agent read it late).
    pub lost_samples: u64,
    /// Kernel stacks the kernel could not walk (`bpf_get_stack` failed): the sample keeps
    /// its user frames.
    pub lost_kernel_stacks: u64,
    /// User stacks the kernel could not walk.
    pub lost_user_stacks: u64,
}
const _: () = assert!(size_of::<SamplerCounters>() == 32);

/// Python frames kept per sample (innermost first).
pub const PY_MAX_FRAMES: usize = 40;
/// Threads of one interpreter searched for the sampled thread's state.
pub const PY_MAX_THREADS: u32 = 32;
/// `PyProcess::cframe_frame` when the thread state points at the frame directly (3.13).
pub const PY_NO_CFRAME: u32 = u32::MAX;
/// `_PyInterpreterFrame.owner` of the C-stack shim frames of 3.12+ (skipped).
pub const PY_OWNED_BY_CSTACK: u8 = 3;

/// Where to find the running Python frames of one process: the address of `_PyRuntime` and
/// the byte offsets of the fields the walker follows, for that process's CPython version.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyProcess {
    pub runtime_addr: u64,
    /// `_PyRuntime.interpreters.head`.
    pub interp_head: u32,
    /// `PyInterpreterState.threads.head`.
    pub threads_head: u32,
    /// `PyThreadState.next`.
    pub tstate_next: u32,
    /// `PyThreadState.native_thread_id`.
    pub tstate_native_tid: u32,
    /// `PyThreadState.cframe` (3.11, 3.12) or `.current_frame` (3.13).
    pub tstate_frame: u32,
    /// `_PyCFrame.current_frame`, or [`PY_NO_CFRAME`].
    pub cframe_frame: u32,
    /// `_PyInterpreterFrame.f_code` / `.f_executable`.
    pub frame_code: u32,
    /// `_PyInterpreterFrame.previous`.
    pub frame_previous: u32,
    /// `_PyInterpreterFrame.owner` (one byte).
    pub frame_owner: u32,
    /// `PyCodeObject.co_qualname`.
    pub code_qualname: u32,
    /// `PyCodeObject.co_filename`.
    pub code_filename: u32,
    /// `PyCodeObject.co_firstlineno` (an `int`).
    pub code_firstlineno: u32,
    /// Characters of a compact ASCII `str` (`sizeof(PyASCIIObject)`).
    pub unicode_ascii_data: u32,
    /// `(major << 8) | minor`, e.g. `0x030b`.
    pub version: u32,
}
const _: () = assert!(size_of::<PyProcess>() == 64);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are `repr(C)`, `Copy`, and have no padding or invalid bit patterns.
    unsafe impl aya::Pod for super::FuncFrame {}
    unsafe impl aya::Pod for super::ClockBase {}
    unsafe impl aya::Pod for super::FuncThread {}
    unsafe impl aya::Pod for super::FuncKey {}
    unsafe impl aya::Pod for super::FuncStats {}
    unsafe impl aya::Pod for super::FuncCounters {}
    unsafe impl aya::Pod for super::SamplerCounters {}
    unsafe impl aya::Pod for super::PyProcess {}
}
