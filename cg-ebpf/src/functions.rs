//! Uprobes on chosen functions (`--func`): an entry program and a return program, attached to
//! every function the agent resolved, each attachment carrying the function's id as its BPF
//! cookie. Each target thread keeps a stack of entry frames in `FUNC_THREADS`, so nesting and
//! recursion time correctly; completed calls add to per-(thread, function) totals in
//! `FUNC_STATS` (per thread, so that no two CPUs ever update the same totals).
//!
//! Times are **on-CPU** nanoseconds: the thread's own CPU clock, read as the scheduler's
//! `sum_exec_runtime` when the thread got its CPU (`CpuState::start_runtime_ns`, exact) plus
//! the time since then (`CpuState::switch_in_ns`, which `sched_switch` records only when
//! `FUNC_CLOCK` is set). Time a thread spends off-CPU inside a function does not count.
//! Where the CPU's state names another task (a switch onto the thread that tracing never
//! reported), the thread times itself from a base of its own (`ClockBase`).
//!
//! Uprobes attach by file and offset for every process, so these programs first drop
//! processes that are not targets (one hash lookup).

use aya_ebpf::{
    EbpfContext,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_current_task,
        bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel,
    },
    macros::{map, uprobe, uretprobe},
    maps::{HashMap, PerCpuArray},
    programs::{ProbeContext, RetProbeContext},
};
use cg_common::profiling::{
    COOKIE_ENTRY_ONLY, ClockBase, FRAME_OUTERMOST, FUNC_MAX_DEPTH, FUNC_MAX_STATS,
    FUNC_MAX_THREADS, FuncCounters, FuncFrame, FuncKey, FuncStats, FuncThread,
};

use crate::{CPU_STATE, TASK_RUNTIME_OFFSET, global, is_target};

// Globals set by user space at load time (see `cg_common::profiling::globals`).
#[unsafe(no_mangle)]
pub(crate) static FUNC_CLOCK: u32 = 0;
#[unsafe(no_mangle)]
static NOOP_FUNC: u32 = 0;

#[map]
static FUNC_THREADS: HashMap<u32, FuncThread> = HashMap::with_max_entries(FUNC_MAX_THREADS, 0);

#[map]
static FUNC_STATS: HashMap<FuncKey, FuncStats> = HashMap::with_max_entries(FUNC_MAX_STATS, 0);

#[map]
static FUNC_COUNTERS: PerCpuArray<FuncCounters> = PerCpuArray::with_max_entries(1, 0);

/// A zeroed `FuncThread` to insert from: it is larger than the eBPF stack.
#[map]
static FUNC_ZERO: PerCpuArray<FuncThread> = PerCpuArray::with_max_entries(1, 0);

/// Frames below the top that a return searches for its entry.
const SEARCH_FRAMES: usize = 4;

#[inline(always)]
fn count(update: impl FnOnce(&mut FuncCounters)) {
    if let Some(counters) = FUNC_COUNTERS.get_ptr_mut(0) {
        // SAFETY: this CPU's slot. A program preempted by another on the same CPU may lose
        // an increment; these are diagnostics.
        update(unsafe { &mut *counters });
    }
}

/// The calling thread's on-CPU clock, in nanoseconds; `thread` is its entry stack.
#[inline(always)]
fn thread_clock(tid: u32, thread: *mut FuncThread) -> u64 {
    if let Some(state) = CPU_STATE.get_ptr(0) {
        // The program is preemptible (uprobes run with migration disabled only), so a switch
        // may rewrite the state while we read it: read it like user space does, seq_begin
        // first and seq_end last, with the clock read in between.
        for _ in 0..2 {
            // SAFETY: this CPU's slot, read with volatile loads; a torn read is detected by
            // the sequence numbers.
            unsafe {
                let begin = core::ptr::read_volatile(&(*state).seq_begin);
                let start_runtime = core::ptr::read_volatile(&(*state).start_runtime_ns);
                let running = core::ptr::read_volatile(&(*state).tid);
                let switch_in = core::ptr::read_volatile(&(*state).switch_in_ns);
                let now = bpf_ktime_get_ns();
                let end = core::ptr::read_volatile(&(*state).seq_end);
                if begin != end || switch_in == 0 {
                    continue;
                }
                if running == tid {
                    return start_runtime + now.saturating_sub(switch_in);
                }
                // The state names another task: the switch onto this thread went unreported.
                return unreported_switch_clock(thread, end, now);
            }
        }
    }
    count(|c| c.clock_fallbacks += 1);
    scheduler_runtime()
}

/// The thread's clock while its CPU's state (sequence `seq`) names another task: its own
/// base, taken at the first such read (see `ClockBase`), so that differences stay exact.
#[inline(always)]
fn unreported_switch_clock(thread: *mut FuncThread, seq: u64, now: u64) -> u64 {
    // SAFETY: no helper arguments; only this thread writes its own entry.
    unsafe {
        let cpu = bpf_get_smp_processor_id() + 1;
        let base = &mut (*thread).clock;
        if base.cpu == cpu && base.seq == seq {
            return base.runtime_ns + now.saturating_sub(base.at_ns);
        }
        count(|c| c.clock_fallbacks += 1);
        let runtime = scheduler_runtime();
        *base = ClockBase {
            cpu,
            _pad: 0,
            seq,
            runtime_ns: runtime,
            at_ns: now,
        };
        runtime
    }
}

/// The scheduler's own runtime of the calling task: exact up to its last update (a tick ago
/// at most while it runs).
#[inline(always)]
fn scheduler_runtime() -> u64 {
    // SAFETY: bpf_probe_read_kernel validates the address.
    unsafe {
        let task = bpf_get_current_task() as *const u8;
        bpf_probe_read_kernel(task.add(global(&TASK_RUNTIME_OFFSET) as usize) as *const u64)
            .unwrap_or(0)
    }
}

/// The entry stack of thread `tid`, created empty on first use.
#[inline(always)]
fn thread_frames(tgid: u32, tid: u32) -> Option<*mut FuncThread> {
    let thread = match FUNC_THREADS.get_ptr_mut(tid) {
        Some(thread) => thread,
        None => {
            // SAFETY: a map value pointer, valid for the duration of the program. Passed by
            // reference: the value is larger than the eBPF stack.
            let zero: &FuncThread = unsafe { &*FUNC_ZERO.get_ptr(0)? };
            if FUNC_THREADS
                .insert(tid, zero, u64::from(BPF_NOEXIST))
                .is_err()
                && FUNC_THREADS.get_ptr(tid).is_none()
            {
                count(|c| c.map_full += 1);
                return None;
            }
            FUNC_THREADS.get_ptr_mut(tid)?
        }
    };
    // SAFETY: only this thread writes its own entry.
    unsafe {
        if (*thread).tgid != tgid {
            // A new thread, or a thread id reused by another process.
            (*thread).tgid = tgid;
            (*thread).depth = 0;
            (*thread).overflow = 0;
        }
    }
    Some(thread)
}

/// The totals of one (thread, function), created on first use.
#[inline(always)]
fn stats_of(key: FuncKey) -> Option<*mut FuncStats> {
    if let Some(stats) = FUNC_STATS.get_ptr_mut(key) {
        return Some(stats);
    }
    let _ = FUNC_STATS.insert(key, FuncStats::default(), u64::from(BPF_NOEXIST));
    let stats = FUNC_STATS.get_ptr_mut(key);
    if stats.is_none() {
        count(|c| c.map_full += 1);
    }
    stats
}

#[uprobe]
pub fn func_entry(ctx: ProbeContext) -> u32 {
    match try_func_entry(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_func_entry(ctx: &ProbeContext) -> Result<u32, u32> {
    if global(&NOOP_FUNC) != 0 {
        return Ok(0);
    }
    count(|c| c.entries += 1);
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // A thread with an entry stack of this process is a target's (only targets get one):
    // one lookup instead of two on every call after the first.
    let thread = match FUNC_THREADS.get_ptr_mut(tid) {
        // SAFETY: only this thread writes its own entry.
        Some(thread) if unsafe { (*thread).tgid } == tgid => thread,
        _ => {
            if !is_target(tgid) {
                return Ok(0);
            }
            thread_frames(tgid, tid).ok_or(0u32)?
        }
    };
    // SAFETY: the context is the program's own.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let func = cookie as u32;
    if cookie & COOKIE_ENTRY_ONLY != 0 {
        // No return probe will pop a frame: count the call, time nothing.
        if let Some(stats) = stats_of(FuncKey {
            tgid,
            tid,
            func,
            _pad: 0,
        }) {
            // SAFETY: only this thread writes its own totals.
            unsafe { (*stats).calls += 1 };
        }
        return Ok(0);
    }
    // SAFETY: only this thread writes its own entry.
    unsafe {
        let depth = (*thread).depth as usize;
        if depth >= FUNC_MAX_DEPTH {
            (*thread).overflow += 1;
            count(|c| c.overflows += 1);
            return Ok(0);
        }
        let mut flags = FRAME_OUTERMOST;
        for i in 0..FUNC_MAX_DEPTH {
            if i >= depth {
                break;
            }
            if (*thread).frames[i].func == func {
                flags = 0;
                break;
            }
        }
        // The clock last, so that our own work is not charged to the function.
        let entry_ns = thread_clock(tid, thread);
        if let Some(frame) = (*thread).frames.get_mut(depth) {
            *frame = FuncFrame {
                func,
                flags,
                entry_ns,
                child_ns: 0,
            };
            (*thread).depth = depth as u32 + 1;
        }
    }
    Ok(0)
}

#[uretprobe]
pub fn func_return(ctx: RetProbeContext) -> u32 {
    match try_func_return(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_func_return(ctx: &RetProbeContext) -> Result<u32, u32> {
    if global(&NOOP_FUNC) != 0 {
        return Ok(0);
    }
    count(|c| c.returns += 1);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // Threads that never entered a probed function as targets have no entry stack.
    let thread = FUNC_THREADS.get_ptr_mut(tid).ok_or(0u32)?;
    // The clock first, so that our own work is not charged to the function.
    let now_ns = thread_clock(tid, thread);
    // SAFETY: the context is the program's own.
    let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    // SAFETY: only this thread writes its own entry.
    unsafe {
        if (*thread).tgid != (pid_tgid >> 32) as u32 {
            return Ok(0);
        }
        if (*thread).overflow > 0 {
            (*thread).overflow -= 1;
            return Ok(0);
        }
        let depth = (*thread).depth as usize;
        if depth == 0 || depth > FUNC_MAX_DEPTH {
            count(|c| c.unmatched_returns += 1);
            return Ok(0);
        }
        // The innermost frame of this function: normally the top one. A longjmp or an
        // exception may have skipped the returns of a few frames above it: those are
        // dropped. Only the top few frames are searched, which keeps verification cheap.
        let mut index = FUNC_MAX_DEPTH;
        for k in 0..SEARCH_FRAMES {
            let i = depth.wrapping_sub(1 + k);
            match (*thread).frames.get(i) {
                Some(frame) if frame.func == func => {
                    index = i;
                    break;
                }
                Some(_) => {}
                None => break,
            }
        }
        let Some(frame) = (*thread).frames.get(index).copied() else {
            count(|c| c.unmatched_returns += 1);
            return Ok(0);
        };
        if index + 1 < depth {
            let dropped = (depth - 1 - index) as u64;
            count(|c| c.abandoned_frames += dropped);
        }
        let incl_ns = now_ns.saturating_sub(frame.entry_ns);
        let self_ns = incl_ns.saturating_sub(frame.child_ns);
        if index > 0
            && let Some(parent) = (*thread).frames.get_mut(index - 1)
        {
            parent.child_ns += incl_ns;
        }
        (*thread).depth = index as u32;
        let key = FuncKey {
            tgid: (*thread).tgid,
            tid,
            func,
            _pad: 0,
        };
        let Some(stats) = stats_of(key) else {
            return Ok(0);
        };
        (*stats).calls += 1;
        (*stats).self_ns += self_ns;
        if frame.flags & FRAME_OUTERMOST != 0 {
            (*stats).incl_ns += incl_ns;
        }
    }
    Ok(0)
}
