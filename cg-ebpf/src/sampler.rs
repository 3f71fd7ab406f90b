//! The stack sampler (`--profile`): a perf-event program on each CPU's software CPU clock.
//! For a target thread it captures the kernel and user stacks (`STACKS`, by id), and for a
//! CPython process (listed in `PY_PROCS` by the agent) the Python frames, read from the
//! interpreter's own structures; it counts the sample in a hash keyed by thread and stacks,
//! so nothing crosses into user space per sample. The agent reads and clears the hash every
//! interval, flipping `SAMPLE_SELECT` to the other of two hashes first.
//!
//! The CPython walker: `_PyRuntime.interpreters.head` -> `threads.head` -> the thread state
//! whose `native_thread_id` is the sampled thread (cached per thread) -> its current frame
//! -> `previous`... Each frame contributes its code object's address (0 for the C-stack
//! shim frames of 3.12+); the agent reads the code objects' names from the process. The
//! offsets come per process from the agent, for the CPython version that process runs.
//! The loop stores frame `i` at index `i` whatever it holds, so the verifier sees one
//! counter and checks the walk in linear time.

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{map, perf_event},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext},
};
use cg_common::profiling::{
    PY_MAX_FRAMES, PY_MAX_THREADS, PY_NO_CFRAME, PY_OWNED_BY_CSTACK, PyProcess, PyStack,
    SAMPLES_MAX, STACKS_MAX, SampleKey, SamplerCounters,
};

use crate::is_target;

#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(STACKS_MAX, 0);

#[map]
static SAMPLES_A: HashMap<SampleKey, u64> = HashMap::with_max_entries(SAMPLES_MAX, 0);

#[map]
static SAMPLES_B: HashMap<SampleKey, u64> = HashMap::with_max_entries(SAMPLES_MAX, 0);

#[map]
static SAMPLE_SELECT: Array<u32> = Array::with_max_entries(1, 0);

#[map]
static SAMPLER_COUNTERS: PerCpuArray<SamplerCounters> = PerCpuArray::with_max_entries(1, 0);

#[map]
static PY_PROCS: HashMap<u32, PyProcess> = HashMap::with_max_entries(1024, 0);

#[map]
static PY_STACKS: HashMap<u64, PyStack> = HashMap::with_max_entries(16_384, 0);

/// Thread id -> its `PyThreadState` address (checked on every use).
#[map]
static PY_TSTATES: LruHashMap<u32, u64> = LruHashMap::with_max_entries(4_096, 0);

/// Scratch space: a stack is too large for the eBPF stack.
#[map]
static PY_STACK_SCRATCH: PerCpuArray<PyStack> = PerCpuArray::with_max_entries(1, 0);

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
    let kernel_stack = ctx.get_stackid(&STACKS, 0).map_or(-1, |id| id as i32);
    let user_stack = match ctx.get_stackid(&STACKS, u64::from(BPF_F_USER_STACK)) {
        Ok(id) => id as i32,
        Err(_) => {
            count(|c| c.lost_user_stacks += 1);
            -1
        }
    };
    let py_stack = match PY_PROCS.get_ptr(tgid) {
        // SAFETY: a map value, copied.
        Some(process) => python_stack(tid, &unsafe { *process }).unwrap_or(0),
        None => 0,
    };
    let key = SampleKey {
        tgid,
        tid,
        kernel_stack,
        user_stack,
        py_stack,
    };
    let samples = match SAMPLE_SELECT.get(0) {
        Some(&1) => &SAMPLES_B,
        _ => &SAMPLES_A,
    };
    // The key holds the thread, which runs on one CPU at a time: no other CPU updates it.
    if let Some(n) = samples.get_ptr_mut(key) {
        // SAFETY: a map value that only this thread's samples touch.
        unsafe { *n += 1 };
        return Ok(0);
    }
    if samples.insert(key, 1, u64::from(BPF_NOEXIST)).is_err() {
        count(|c| c.lost_samples += 1);
    }
    Ok(0)
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

/// Walks the thread's Python frames into `PY_STACKS`; returns the stack's key (0: none).
#[inline(always)]
fn python_stack(tid: u32, process: &PyProcess) -> Option<u64> {
    let tstate = thread_state(tid, process)?;
    let mut frame: u64 = read(tstate + u64::from(process.tstate_frame))?;
    if process.cframe_frame != PY_NO_CFRAME && frame != 0 {
        frame = read(frame + u64::from(process.cframe_frame))?;
    }
    let stack = PY_STACK_SCRATCH.get_ptr_mut(0)?;
    let mut len = 0u32;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for i in 0..PY_MAX_FRAMES {
        if frame == 0 {
            break;
        }
        let code: u64 = read(frame + u64::from(process.frame_code)).unwrap_or(0);
        let owner: u8 = read(frame + u64::from(process.frame_owner)).unwrap_or(0);
        let code = if owner == PY_OWNED_BY_CSTACK { 0 } else { code };
        // SAFETY: this CPU's scratch slot; `i` is below the array's length.
        unsafe {
            if let Some(slot) = (*stack).codes.get_mut(i) {
                *slot = code;
            }
        }
        len = i as u32 + 1;
        hash = (hash ^ code).wrapping_mul(0x0000_0100_0000_01b3);
        frame = read(frame + u64::from(process.frame_previous)).unwrap_or(0);
    }
    if len == 0 {
        return None;
    }
    // SAFETY: as above.
    unsafe {
        (*stack).len = len;
        (*stack).truncated = u32::from(frame != 0);
    }
    let key = hash | 1;
    // SAFETY: a map value pointer, valid for the duration of the program. Passed by
    // reference: the value is too large to copy onto the eBPF stack.
    let stack: &PyStack = unsafe { &*stack };
    if PY_STACKS.get_ptr(key).is_none()
        && PY_STACKS
            .insert(key, stack, u64::from(BPF_NOEXIST))
            .is_err()
    {
        count(|c| c.lost_py += 1);
    }
    Some(key)
}
