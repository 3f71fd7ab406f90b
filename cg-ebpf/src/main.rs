//! cg-trace's eBPF programs.
//!
//! - `sched_switch` charges each slice a task spent on a CPU to that task, aggregated in
//!   kernel maps that user space reads once per interval: per target thread in `ON_CPU`
//!   (per-CPU hash, fronted by a few per-CPU cache slots in `CPU_STATE` so that a CPU
//!   switching among a few threads rarely touches the hash), and per CPU for non-target time
//!   in `CPU_STATE`. No event per switch crosses into user space. A slice's length is the growth of the kernel's own
//!   `se.sum_exec_runtime` of the task leaving the CPU: exact, and it needs no clock read in
//!   this hot path (in the development VM a clock read costs more than all the rest).
//! - `sched_process_fork/exec/exit` follow targets' descendants (adding them to `TARGETS` in
//!   the kernel, so none is missed between two reads) and report lifecycle events through a
//!   ring buffer that user space drains on its timer (no wakeups).
//!
//! - Function-level programs live in their own modules: [`functions`] (uprobes on chosen
//!   functions, with per-thread entry stacks) and [`sampler`] (CPU-clock stack sampling and
//!   the CPython frame walker).
//!
//! BTF tracepoints: task_struct fields are plain loads, which the verifier checks against the
//! kernel's BTF and turns into fault-safe loads. Rust eBPF has no CO-RE here, so the field
//! offsets come from user space (read from `/sys/kernel/btf/vmlinux`) as read-only globals;
//! the kernel freezes them, so the verifier sees them as constants.
#![no_std]
#![no_main]

mod functions;
mod sampler;

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_comm, bpf_ktime_get_ns, bpf_probe_read_kernel_str_bytes},
    macros::{btf_tracepoint, map},
    maps::{HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::BtfTracePointContext,
};
use cg_common::{
    CACHE_SLOTS, CachedTime, CpuState, EVENTS_RING_BYTES, LifecycleEvent, LossCounters,
    ON_CPU_MAX_THREADS, TARGETS_MAX_PROCESSES, ThreadKey, ThreadTime, event_kind,
};

// Globals set by user space at load time (see `cg_common::globals`).
#[unsafe(no_mangle)]
static ALL_TASKS: u32 = 0;
#[unsafe(no_mangle)]
static NOOP_SWITCH: u32 = 0;
#[unsafe(no_mangle)]
static SPAWNER_TGID: u32 = 0;
#[unsafe(no_mangle)]
static TASK_PID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_RUNTIME_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_EXIT_CODE_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static BINPRM_FILENAME_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static EXIT_HAS_GROUP_DEAD: u32 = 0;

#[map]
static ON_CPU: PerCpuHashMap<ThreadKey, ThreadTime> =
    PerCpuHashMap::with_max_entries(ON_CPU_MAX_THREADS, 0);

#[map]
static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

#[map]
static TARGETS: HashMap<u32, u32> = HashMap::with_max_entries(TARGETS_MAX_PROCESSES, 0);

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);

#[map]
static LOSSES: PerCpuArray<LossCounters> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn global(value: &'static u32) -> u32 {
    // SAFETY: reading a plain static; volatile so the compiler keeps the load that the loader
    // patches instead of folding the placeholder value.
    unsafe { core::ptr::read_volatile(value) }
}

/// A field of a kernel object passed to a BTF tracepoint, `offset` bytes in.
#[inline(always)]
fn field<T: Copy>(object: *const u8, offset: u32) -> T {
    // SAFETY: `object` is a BTF-typed kernel pointer (tp_btf argument) and `offset` a
    // verifier-known constant; the verifier checks the access against BTF and makes the load
    // fault-safe.
    unsafe { core::ptr::read_volatile(object.add(offset as usize) as *const T) }
}

#[inline(always)]
fn is_target(tgid: u32) -> bool {
    global(&ALL_TASKS) != 0 || TARGETS.get_ptr(tgid).is_some()
}

#[inline(always)]
fn count_loss(update: impl FnOnce(&mut LossCounters)) {
    if let Some(losses) = LOSSES.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, only this CPU writes it, and preemption is off in BPF programs.
        update(unsafe { &mut *losses });
    }
}

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    // Arguments: (bool preempt, struct task_struct *prev, struct task_struct *next, ...).
    // The scheduler has just brought prev's sum_exec_runtime up to date.
    if global(&NOOP_SWITCH) != 0 {
        return 0;
    }
    let prev: *const u8 = ctx.arg(1);
    let next: *const u8 = ctx.arg(2);
    let Some(state) = CPU_STATE.get_ptr_mut(0) else {
        return 0;
    };
    let prev_tid: u32 = field(prev, global(&TASK_PID_OFFSET));
    let prev_runtime: u64 = field(prev, global(&TASK_RUNTIME_OFFSET));
    let next_tid: u32 = field(next, global(&TASK_PID_OFFSET));
    let next_tgid: u32 = field(next, global(&TASK_TGID_OFFSET));
    let next_runtime: u64 = field(next, global(&TASK_RUNTIME_OFFSET));

    // SAFETY: per-CPU slot written only by this CPU with preemption off. User space copies
    // it front to back while we may be writing; we write back to front (seq_end, body,
    // seq_begin), so a copy that overlapped a write sees seq_begin != seq_end and retries.
    unsafe {
        let seq = (*state).seq_end.wrapping_add(1);
        core::ptr::write_volatile(&mut (*state).seq_end, seq);
        // prev should be the task this CPU recorded at its previous switch (as next); its
        // start_runtime is only meaningful then. The idle task (tid 0) is never charged:
        // idle time is what remains of an interval.
        if (*state).valid != 0 {
            let (prev_tgid, recorded_tid) = ((*state).tgid, (*state).tid);
            if recorded_tid != prev_tid {
                count_loss(|l| l.unmatched_switches += 1);
            } else if prev_tid != 0 {
                let slice = prev_runtime.saturating_sub((*state).start_runtime_ns);
                if slice != 0 {
                    charge(state, prev_tgid, prev_tid, slice);
                }
            }
        }
        core::ptr::write_volatile(&mut (*state).start_runtime_ns, next_runtime);
        // Only with function probes (a frozen global: the verifier drops this when 0).
        if global(&functions::FUNC_CLOCK) != 0 {
            core::ptr::write_volatile(&mut (*state).switch_in_ns, bpf_ktime_get_ns());
        }
        core::ptr::write_volatile(&mut (*state).tgid, next_tgid);
        core::ptr::write_volatile(&mut (*state).tid, next_tid);
        if (*state).valid == 0 {
            core::ptr::write_volatile(&mut (*state).valid, 1);
        }
        core::ptr::write_volatile(&mut (*state).seq_begin, seq);
    }
    0
}

/// Charges `slice_ns` of this CPU to the task leaving it.
#[inline(always)]
unsafe fn charge(state: *mut CpuState, tgid: u32, tid: u32, slice_ns: u64) {
    unsafe {
        // A thread this CPU charged recently: add to its cache slot, no map access.
        for slot in 0..CACHE_SLOTS {
            let cached = &mut (*state).cache[slot];
            if cached.tid == tid && cached.tgid == tgid {
                core::ptr::write_volatile(&mut cached.pending_ns, cached.pending_ns + slice_ns);
                return;
            }
        }
        if !is_target(tgid) {
            let other = (*state).other_ns + slice_ns;
            core::ptr::write_volatile(&mut (*state).other_ns, other);
            return;
        }
        // Take the next slot round robin, moving what it held into the map first.
        let index = ((*state).next_slot as usize) % CACHE_SLOTS;
        core::ptr::write_volatile(&mut (*state).next_slot, (*state).next_slot.wrapping_add(1));
        let evicted = (*state).cache[index];
        core::ptr::write_volatile(
            &mut (*state).cache[index],
            CachedTime {
                tgid,
                tid,
                pending_ns: slice_ns,
            },
        );
        if evicted.tid != 0 && evicted.pending_ns != 0 {
            store(state, evicted);
        }
    }
}

/// Adds a cache slot's pending time to the thread's entry in `ON_CPU`.
#[inline(always)]
unsafe fn store(state: *mut CpuState, cached: CachedTime) {
    let key = ThreadKey {
        tgid: cached.tgid,
        tid: cached.tid,
    };
    unsafe {
        if let Some(time) = ON_CPU.get_ptr_mut(key) {
            (*time).on_cpu_ns += cached.pending_ns;
            return;
        }
        let time = ThreadTime {
            on_cpu_ns: cached.pending_ns,
        };
        if ON_CPU.insert(key, time, u64::from(BPF_NOEXIST)).is_err() {
            let unstored = (*state).unstored_ns + cached.pending_ns;
            core::ptr::write_volatile(&mut (*state).unstored_ns, unstored);
            count_loss(|l| l.on_cpu_full += 1);
        }
    }
}

/// Reserves a ring-buffer slot and fills the fields every event has.
#[inline(always)]
fn emit(kind: u32, tgid: u32, tid: u32, parent_tgid: u32, fill: impl FnOnce(&mut LifecycleEvent)) {
    let Some(mut entry) = EVENTS.reserve::<LifecycleEvent>(0) else {
        count_loss(|l| l.events_dropped += 1);
        return;
    };
    let event = LifecycleEvent {
        kind,
        tgid,
        tid,
        parent_tgid,
        timestamp_ns: unsafe { bpf_ktime_get_ns() },
        exit_code: 0,
        group_dead: 0,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        filename: [0; cg_common::FILENAME_LEN],
    };
    let slot = entry.write(event);
    fill(slot);
    entry.submit(u64::from(BPF_RB_NO_WAKEUP));
}

#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> i32 {
    // Arguments: (struct task_struct *parent, struct task_struct *child). Runs in the parent.
    let parent: *const u8 = ctx.arg(0);
    let child: *const u8 = ctx.arg(1);
    let parent_tgid: u32 = field(parent, global(&TASK_TGID_OFFSET));
    let child_tgid: u32 = field(child, global(&TASK_TGID_OFFSET));
    let child_tid: u32 = field(child, global(&TASK_PID_OFFSET));
    if child_tgid == parent_tgid || child_tgid == 0 {
        // A new thread: threads of a target are accounted through their tgid already.
        return 0;
    }
    let spawner = global(&SPAWNER_TGID);
    let follow = is_target(parent_tgid) || (spawner != 0 && parent_tgid == spawner);
    if !follow {
        return 0;
    }
    if global(&ALL_TASKS) == 0 && TARGETS.insert(child_tgid, 1, 0).is_err() {
        count_loss(|l| l.targets_full += 1);
    }
    emit(event_kind::FORK, child_tgid, child_tid, parent_tgid, |_| {});
    0
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    // Arguments: (struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm). Runs in p,
    // after its comm was set to the new program's name.
    let task: *const u8 = ctx.arg(0);
    let tgid: u32 = field(task, global(&TASK_TGID_OFFSET));
    let tid: u32 = field(task, global(&TASK_PID_OFFSET));
    if !is_target(tgid) {
        return 0;
    }
    let bprm: *const u8 = ctx.arg(2);
    let filename: *const u8 = field(bprm, global(&BINPRM_FILENAME_OFFSET));
    emit(event_kind::EXEC, tgid, tid, 0, |event| {
        // SAFETY: the probe read validates the address it is given.
        unsafe {
            let _ = bpf_probe_read_kernel_str_bytes(filename, &mut event.filename);
        }
    });
    0
}

#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    // Arguments: (struct task_struct *p[, bool group_dead]). Runs in the exiting thread, which
    // still gets switched out once more afterwards: that last slice is charged as usual.
    let task: *const u8 = ctx.arg(0);
    let tgid: u32 = field(task, global(&TASK_TGID_OFFSET));
    let tid: u32 = field(task, global(&TASK_PID_OFFSET));
    if !is_target(tgid) {
        return 0;
    }
    let group_dead = if global(&EXIT_HAS_GROUP_DEAD) != 0 {
        let flag: u64 = ctx.arg(1);
        u32::from(flag & 0xff != 0)
    } else {
        u32::from(tid == tgid)
    };
    let exit_code: u32 = field(task, global(&TASK_EXIT_CODE_OFFSET));
    emit(event_kind::EXIT, tgid, tid, 0, |event| {
        event.exit_code = exit_code;
        event.group_dead = group_dead;
    });
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
