//! cg-trace's eBPF programs.
//!
//! - `sched_switch` charges the time each task spent on a CPU to that task, aggregated in
//!   kernel maps that user space reads once per interval: per target thread in `ON_CPU`
//!   (per-CPU hash), and per CPU for idle and non-target time in `CPU_STATE`. No event per
//!   switch crosses into user space.
//! - `sched_process_fork/exec/exit` follow targets' descendants (adding them to `TARGETS` in
//!   the kernel, so none is missed between two reads) and report lifecycle events through a
//!   ring buffer that user space drains on its timer (no wakeups).
//!
//! Raw tracepoints (not tp_btf): the programs read task_struct fields with probe reads at
//! byte offsets that user space takes from the running kernel's BTF and sets as read-only
//! globals at load time (Rust eBPF has no CO-RE here), so loading needs no BTF parsing by
//! aya and attaching needs no tracefs.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
        bpf_probe_read_kernel_str_bytes,
    },
    macros::{map, raw_tracepoint},
    maps::{HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::RawTracePointContext,
};
use cg_common::{
    CpuState, EVENTS_RING_BYTES, LifecycleEvent, LossCounters, ON_CPU_MAX_THREADS,
    TARGETS_MAX_PROCESSES, ThreadKey, ThreadTime, event_kind,
};

// Globals set by user space at load time (see `cg_common::globals`). They live in .rodata,
// which the kernel freezes, so the verifier treats them as constants.
#[unsafe(no_mangle)]
static ALL_TASKS: u32 = 0;
#[unsafe(no_mangle)]
static SPAWNER_TGID: u32 = 0;
#[unsafe(no_mangle)]
static TASK_PID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u32 = 0;
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
    // SAFETY: reading a plain static; volatile so the compiler keeps the load that the loader's
    // override patches instead of folding the placeholder value.
    unsafe { core::ptr::read_volatile(value) }
}

/// Reads a `u32` field at `offset` bytes into a kernel object.
#[inline(always)]
fn read_kernel_u32(base: *const u8, offset: u32) -> u32 {
    // SAFETY: bpf_probe_read_kernel validates the address; a fault yields an error, not a crash.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const u32).unwrap_or(0) }
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

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> u32 {
    // Arguments: (bool preempt, struct task_struct *prev, struct task_struct *next, ...).
    // `prev` is the task running now, so the pid_tgid helper names it.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(state) = CPU_STATE.get_ptr_mut(0) else {
        return 0;
    };
    let next: *const u8 = ctx.arg(2);
    let next_tid = read_kernel_u32(next, global(&TASK_PID_OFFSET));
    let next_tgid = read_kernel_u32(next, global(&TASK_TGID_OFFSET));
    let prev = bpf_get_current_pid_tgid();
    let (prev_tgid, prev_tid) = ((prev >> 32) as u32, prev as u32);

    // SAFETY: per-CPU slot written only by this CPU with preemption off; user space reads it
    // concurrently and uses seq_begin/seq_end to detect a write in flight.
    unsafe {
        let seq = (*state).seq_begin.wrapping_add(1);
        core::ptr::write_volatile(&mut (*state).seq_begin, seq);
        let since = (*state).since_ns;
        if since != 0 && now > since {
            charge(state, prev_tgid, prev_tid, now - since);
        }
        core::ptr::write_volatile(&mut (*state).since_ns, now);
        core::ptr::write_volatile(&mut (*state).tgid, next_tgid);
        core::ptr::write_volatile(&mut (*state).tid, next_tid);
        core::ptr::write_volatile(&mut (*state).seq_end, seq);
    }
    0
}

/// Charges `delta_ns` of this CPU to the task leaving it.
#[inline(always)]
unsafe fn charge(state: *mut CpuState, tgid: u32, tid: u32, delta_ns: u64) {
    unsafe {
        if tgid == 0 {
            let idle = (*state).idle_ns + delta_ns;
            core::ptr::write_volatile(&mut (*state).idle_ns, idle);
            return;
        }
        if !is_target(tgid) {
            let other = (*state).other_ns + delta_ns;
            core::ptr::write_volatile(&mut (*state).other_ns, other);
            return;
        }
        let key = ThreadKey { tgid, tid };
        if let Some(time) = ON_CPU.get_ptr_mut(key) {
            (*time).on_cpu_ns += delta_ns;
            (*time).switches += 1;
            return;
        }
        let time = ThreadTime {
            on_cpu_ns: delta_ns,
            switches: 1,
        };
        if ON_CPU.insert(key, time, u64::from(BPF_NOEXIST)).is_err() {
            let unstored = (*state).unstored_ns + delta_ns;
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

#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_process_fork(ctx: RawTracePointContext) -> u32 {
    // Arguments: (struct task_struct *parent, struct task_struct *child). Runs in the parent.
    let parent: *const u8 = ctx.arg(0);
    let child: *const u8 = ctx.arg(1);
    let parent_tgid = read_kernel_u32(parent, global(&TASK_TGID_OFFSET));
    let child_tgid = read_kernel_u32(child, global(&TASK_TGID_OFFSET));
    let child_tid = read_kernel_u32(child, global(&TASK_PID_OFFSET));
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

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec(ctx: RawTracePointContext) -> u32 {
    // Arguments: (struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm). Runs in p,
    // after its comm was set to the new program's name.
    let id = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((id >> 32) as u32, id as u32);
    if !is_target(tgid) {
        return 0;
    }
    let bprm: *const u8 = ctx.arg(2);
    emit(event_kind::EXEC, tgid, tid, 0, |event| {
        let offset = global(&BINPRM_FILENAME_OFFSET) as usize;
        // SAFETY: probe reads validate the addresses they are given.
        unsafe {
            if let Ok(filename) =
                bpf_probe_read_kernel(bprm.wrapping_add(offset) as *const *const u8)
            {
                let _ = bpf_probe_read_kernel_str_bytes(filename, &mut event.filename);
            }
        }
    });
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn sched_process_exit(ctx: RawTracePointContext) -> u32 {
    // Arguments: (struct task_struct *p[, bool group_dead]). Runs in the exiting thread, which
    // still gets switched out once more afterwards: that last slice is charged as usual.
    let id = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((id >> 32) as u32, id as u32);
    if !is_target(tgid) {
        return 0;
    }
    let task: *const u8 = ctx.arg(0);
    let group_dead = if global(&EXIT_HAS_GROUP_DEAD) != 0 {
        let flag: u64 = ctx.arg(1);
        u32::from(flag & 0xff != 0)
    } else {
        u32::from(tid == tgid)
    };
    let exit_code = read_kernel_u32(task, global(&TASK_EXIT_CODE_OFFSET));
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
