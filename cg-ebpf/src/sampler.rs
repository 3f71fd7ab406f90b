//! The stack sampler (`--profile`): a perf-event program on each CPU's software CPU clock.
//! For a target thread it reserves a record in `SAMPLE_RING` and writes into it the kernel
//! and user stacks (`bpf_get_stack`) and, for a CPython process (listed in `PY_PROCS` by the
//! agent), the Python frames read from the interpreter's own structures; then submits it
//! without waking anyone. The agent drains the ring every interval and keys the stacks by
//! content.
//!
//! Why a ring and not maps aggregated in the kernel: almost every sample has a stack of its
//! own (the interrupted address is its innermost frame), so a map keyed by stack aggregates
//! little and fills: the kernel's stack-trace map (a slot per hash bucket, never freed)
//! refused 2-17 % of stacks over a few seconds at 999 Hz, and a content-keyed hash costs a
//! hash of every address and two map updates per sample. The ring costs a reservation per
//! sample, loses a sample only when the agent reads late (counted), and never a stack alone.
//!
//! Stacks without frame pointers: when the agent sets `STACK_COPY` (a constant set at load:
//! frame-pointer-only runs take today's path, with today's record size), the record is a
//! `StackCopyRecord`: the same fields plus the thread's user registers (from
//! `bpf_task_pt_regs`, which are the user ones whether the sample hit user or kernel mode)
//! and the top of its user stack, which the agent unwinds with the mapped files' CFI.
//!
//! The CPython walker: `_PyRuntime.interpreters.head` -> `threads.head` -> the thread state
//! whose `native_thread_id` is the sampled thread (cached per thread) -> its current frame
//! -> `previous`... Each frame contributes its code object's address (0 for the C-stack
//! shim frames of 3.12+); the agent reads the code objects' names from the process. The
//! offsets come per process from the agent, for the CPython version that process runs.
//! The loop stores frame `i` at index `i` whatever it holds, so the verifier sees one
//! counter and checks the walk in linear time.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_F_USER_STACK, BPF_RB_NO_WAKEUP, pt_regs},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_stack, bpf_probe_read_kernel, bpf_probe_read_user,
        generated::{bpf_get_current_task_btf, bpf_task_pt_regs},
    },
    macros::{map, perf_event},
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::PerfEventContext,
};
use cg_common::profiling::{
    PY_MAX_FRAMES, PY_MAX_THREADS, PY_NO_CFRAME, PY_OWNED_BY_CSTACK, PyProcess, SAMPLE_RING_BYTES,
    STACK_COPY_BYTES, STACK_COPY_CHUNK, STACK_MAX_DEPTH, SampleRecord, SamplerCounters,
    StackCopyRecord,
};

use crate::{global, is_target};

// Set by user space at load time (see `cg_common::profiling::globals`).
#[unsafe(no_mangle)]
static STACK_COPY: u32 = 0;

#[map]
static SAMPLE_RING: RingBuf = RingBuf::with_byte_size(SAMPLE_RING_BYTES, 0);

#[map]
static SAMPLER_COUNTERS: PerCpuArray<SamplerCounters> = PerCpuArray::with_max_entries(1, 0);

#[map]
static PY_PROCS: HashMap<u32, PyProcess> = HashMap::with_max_entries(1024, 0);

/// Thread id -> its `PyThreadState` address (checked on every use).
#[map]
static PY_TSTATES: LruHashMap<u32, u64> = LruHashMap::with_max_entries(4_096, 0);

#[inline(always)]
fn count(update: impl FnOnce(&mut SamplerCounters)) {
    if let Some(counters) = SAMPLER_COUNTERS.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; perf-event programs do not nest on a CPU.
        update(unsafe { &mut *counters });
    }
}

#[perf_event]
pub fn sample_stack(ctx: PerfEventContext) -> u32 {
    match try_sample_stack(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_sample_stack(ctx: &PerfEventContext) -> Result<u32, u32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    if tid == 0 || !is_target(tgid) {
        return Ok(0);
    }
    count(|c| c.samples += 1);
    if global(&STACK_COPY) != 0 {
        let Some(mut entry) = SAMPLE_RING.reserve::<StackCopyRecord>(0) else {
            count(|c| c.lost_samples += 1);
            return Ok(0);
        };
        let record = entry.as_mut_ptr();
        // SAFETY: as below; `sample` is the record's first field.
        unsafe {
            fill(ctx, &raw mut (*record).sample, tgid, tid);
            copy_user_stack(record);
        }
        entry.submit(u64::from(BPF_RB_NO_WAKEUP));
        return Ok(0);
    }
    let Some(mut entry) = SAMPLE_RING.reserve::<SampleRecord>(0) else {
        count(|c| c.lost_samples += 1);
        return Ok(0);
    };
    // SAFETY: see `fill`.
    unsafe { fill(ctx, entry.as_mut_ptr(), tgid, tid) };
    entry.submit(u64::from(BPF_RB_NO_WAKEUP));
    Ok(0)
}

/// Writes the thread and its kernel, user (frame-pointer) and Python stacks.
///
/// # Safety
/// `record` is reserved, writable ring memory of one SampleRecord, ours until submitted.
/// Every length field is written here; the arrays are read only as far as their lengths say
/// (the rest holds older records' bytes).
#[inline(always)]
unsafe fn fill(ctx: &PerfEventContext, record: *mut SampleRecord, tgid: u32, tid: u32) {
    unsafe {
        (*record).tgid = tgid;
        (*record).tid = tid;
        let kernel = bpf_get_stack(
            ctx.as_ptr(),
            (*record).kernel.as_mut_ptr() as *mut core::ffi::c_void,
            (STACK_MAX_DEPTH * 8) as u32,
            0,
        );
        (*record).kernel_bytes = kernel as i32;
        if kernel < 0 {
            count(|c| c.lost_kernel_stacks += 1);
        }
        let user = bpf_get_stack(
            ctx.as_ptr(),
            (*record).user.as_mut_ptr() as *mut core::ffi::c_void,
            (STACK_MAX_DEPTH * 8) as u32,
            u64::from(BPF_F_USER_STACK),
        );
        (*record).user_bytes = user as i32;
        if user < 0 {
            count(|c| c.lost_user_stacks += 1);
        }
        (*record).py_len = 0;
        (*record).py_truncated = 0;
        if let Some(process) = PY_PROCS.get_ptr(tgid) {
            // A map value, copied.
            let process = *process;
            if let Some((len, truncated)) = python_stack(tid, &process, &mut (*record).py_codes) {
                (*record).py_len = len;
                (*record).py_truncated = truncated;
            }
        }
    }
}

/// Writes the thread's user registers and copies its user stack from `sp` (rounded down to
/// a piece) up, piece by piece until [`STACK_COPY_BYTES`] or the first piece that cannot be
/// read (the top of the stack).
///
/// # Safety
/// `record` is reserved, writable ring memory of one StackCopyRecord, ours until submitted.
#[inline(always)]
unsafe fn copy_user_stack(record: *mut StackCopyRecord) {
    unsafe {
        (*record).ip = 0;
        (*record).sp = 0;
        (*record).bp = 0;
        (*record).stack_base = 0;
        (*record).stack_bytes = 0;
        (*record)._pad = 0;
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs;
        let (Ok(ip), Ok(sp), Ok(bp)) = (
            bpf_probe_read_kernel(&raw const (*regs).rip),
            bpf_probe_read_kernel(&raw const (*regs).rsp),
            bpf_probe_read_kernel(&raw const (*regs).rbp),
        ) else {
            return;
        };
        (*record).ip = ip;
        (*record).sp = sp;
        (*record).bp = bp;
        if sp == 0 {
            return;
        }
        let base = sp & !(STACK_COPY_CHUNK as u64 - 1);
        (*record).stack_base = base;
        let stack = (*record).stack.as_mut_ptr();
        let mut copied = 0u32;
        for i in 0..STACK_COPY_BYTES / STACK_COPY_CHUNK {
            let offset = i * STACK_COPY_CHUNK;
            let read = aya_ebpf::helpers::generated::bpf_probe_read_user(
                stack.add(offset) as *mut core::ffi::c_void,
                STACK_COPY_CHUNK as u32,
                (base + offset as u64) as *const core::ffi::c_void,
            );
            if read != 0 {
                break;
            }
            copied = (offset + STACK_COPY_CHUNK) as u32;
        }
        (*record).stack_bytes = copied;
    }
}

#[inline(always)]
fn read<T>(address: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_user validates the address.
    unsafe { bpf_probe_read_user(address as *const T) }.ok()
}

/// The sampled thread's `PyThreadState`.
#[inline(always)]
fn thread_state(tid: u32, process: &PyProcess) -> Option<u64> {
    if let Some(cached) = PY_TSTATES.get_ptr(tid) {
        // SAFETY: a map value, copied.
        let tstate = unsafe { *cached };
        if read::<u64>(tstate + u64::from(process.tstate_native_tid)) == Some(u64::from(tid)) {
            return Some(tstate);
        }
    }
    let interp: u64 = read(process.runtime_addr + u64::from(process.interp_head))?;
    if interp == 0 {
        return None;
    }
    let mut tstate: u64 = read(interp + u64::from(process.threads_head))?;
    for _ in 0..PY_MAX_THREADS {
        if tstate == 0 {
            return None;
        }
        if read::<u64>(tstate + u64::from(process.tstate_native_tid)) == Some(u64::from(tid)) {
            let _ = PY_TSTATES.insert(tid, tstate, 0);
            return Some(tstate);
        }
        tstate = read(tstate + u64::from(process.tstate_next))?;
    }
    None
}

/// Walks the thread's Python frames into `codes`, innermost first; returns how many and
/// whether the walk stopped with frames left.
#[inline(always)]
fn python_stack(
    tid: u32,
    process: &PyProcess,
    codes: &mut [u64; PY_MAX_FRAMES],
) -> Option<(u32, u32)> {
    let tstate = thread_state(tid, process)?;
    let mut frame: u64 = read(tstate + u64::from(process.tstate_frame))?;
    if process.cframe_frame != PY_NO_CFRAME && frame != 0 {
        frame = read(frame + u64::from(process.cframe_frame))?;
    }
    let mut len = 0u32;
    for i in 0..PY_MAX_FRAMES {
        if frame == 0 {
            break;
        }
        let code: u64 = read(frame + u64::from(process.frame_code)).unwrap_or(0);
        let owner: u8 = read(frame + u64::from(process.frame_owner)).unwrap_or(0);
        let code = if owner == PY_OWNED_BY_CSTACK { 0 } else { code };
        if let Some(slot) = codes.get_mut(i) {
            *slot = code;
        }
        len = i as u32 + 1;
        frame = read(frame + u64::from(process.frame_previous)).unwrap_or(0);
    }
    (len > 0).then_some((len, u32::from(frame != 0)))
}
