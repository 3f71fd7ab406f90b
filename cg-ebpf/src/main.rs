//! cg-trace's eBPF programs.
//!
//! - `sched_switch` charges each slice a task spent on a CPU to that task, aggregated in
//!   kernel maps that user space reads once per interval: per target thread in `ON_CPU`
//!   (per-CPU hash, fronted by a few per-CPU cache slots in `CPU_STATE` so that a CPU
//!   switching among a few threads rarely touches the hash), and per CPU for non-target time
//!   in `CPU_STATE`. No event per switch crosses into user space. A target's slice is the
//!   growth of the kernel's own `se.sum_exec_runtime` of the thread leaving the CPU since it
//!   was last charged (kept in task storage, `THREAD_MARKS`): exact, it needs no clock read in
//!   this hot path (in the development VM a clock read costs more than all the rest), and a
//!   switch the kernel never reported loses nothing. Threads are keyed by (tgid, tid, start
//!   time) and processes by (tgid, start time), so a reused pid is never someone else's.
//! - `sched_process_fork/exec/exit` follow targets' descendants (adding them to `TARGETS` in
//!   the kernel, so none is missed between two reads) and report lifecycle events through a
//!   ring buffer that user space drains on its timer (no wakeups); `sched_process_free`
//!   removes a target process from `TARGETS` once it is gone for good, so a lost exit event
//!   can leave no stale target behind.
//! - [`iterator`]: iterator accounting (`--accounting iterator`), with no program on context
//!   switches: a walk of the task list that user space runs once per interval, writing each
//!   thread's runtime; `sched_process_exit` and `sched_process_free` (backed by an fentry
//!   program on `__put_task_struct`) then close each task's books.
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
mod iterator;
mod sampler;

use aya_ebpf::{
    bindings::{
        BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, BPF_NOEXIST, BPF_RB_NO_WAKEUP,
        bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE, task_struct,
    },
    helpers::{
        bpf_get_current_comm, bpf_get_current_uid_gid, bpf_ktime_get_ns,
        bpf_probe_read_kernel_str_bytes, generated::bpf_task_storage_get,
    },
    macros::{btf_map, btf_tracepoint, fentry, map},
    maps::{HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePointContext, FEntryContext},
};
use cg_common::{
    CACHE_SLOTS, CachedTime, CpuState, EVENTS_RING_BYTES, LifecycleEvent, LossCounters,
    ON_CPU_MAX_THREADS, TARGETS_MAX_PROCESSES, ThreadKey, ThreadMark, ThreadTime, event_kind,
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
static TASK_START_TIME_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_GROUP_LEADER_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TRACE_START_NS: u64 = 0;
#[unsafe(no_mangle)]
static TASK_EXIT_CODE_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static BINPRM_FILENAME_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static EXIT_HAS_GROUP_DEAD: u32 = 0;
#[unsafe(no_mangle)]
static ITERATOR_MODE: u32 = 0;

#[map]
static ON_CPU: PerCpuHashMap<ThreadKey, ThreadTime> =
    PerCpuHashMap::with_max_entries(ON_CPU_MAX_THREADS, 0);

#[map]
static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

#[map]
static TARGETS: HashMap<u32, u64> = HashMap::with_max_entries(TARGETS_MAX_PROCESSES, 0);

/// The definition of a task storage map as the loader reads it from BTF (aya-ebpf 0.2 has
/// none): per-task values that the kernel frees with the task.
#[repr(C)]
struct TaskStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: placeholder pointers the loader replaces; never dereferenced.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    const fn new() -> Self {
        TaskStorage {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The task's value, created as `init` when it has none; null when it cannot be.
    #[inline(always)]
    fn get_or_create(&self, task: *const u8, init: &mut T) -> *mut T {
        // SAFETY: `task` is a BTF-typed task_struct pointer from a tracepoint argument, which
        // the verifier checks; `init` is copied by the helper.
        unsafe {
            bpf_task_storage_get(
                core::ptr::from_ref(self).cast_mut().cast(),
                task.cast_mut().cast::<task_struct>(),
                core::ptr::from_mut(init).cast(),
                u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE),
            )
            .cast::<T>()
        }
    }

    /// The task's value, null when it has none.
    #[inline(always)]
    fn get(&self, task: *const u8) -> *mut T {
        // SAFETY: as for `get_or_create`; no value is created.
        unsafe {
            bpf_task_storage_get(
                core::ptr::from_ref(self).cast_mut().cast(),
                task.cast_mut().cast::<task_struct>(),
                core::ptr::null_mut(),
                0,
            )
            .cast::<T>()
        }
    }
}

#[btf_map]
static THREAD_MARKS: TaskStorage<ThreadMark> = TaskStorage::new();

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);

#[map]
static LOSSES: PerCpuArray<LossCounters> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn global<T: Copy>(value: &'static T) -> T {
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

/// Whether some process with this pid is a target (for programs that see only the pid; the
/// scheduler and lifecycle programs check the process's start time too: [`is_target_task`]).
#[inline(always)]
fn is_target(tgid: u32) -> bool {
    global(&ALL_TASKS) != 0 || TARGETS.get_ptr(tgid).is_some()
}

/// A task's start time (`task_struct.start_time`).
#[inline(always)]
fn start_time(task: *const u8) -> u64 {
    field(task, global(&TASK_START_TIME_OFFSET))
}

/// The start time of a task's process (its group leader's).
#[inline(always)]
fn process_start_time(task: *const u8) -> u64 {
    let leader: *const u8 = field(task, global(&TASK_GROUP_LEADER_OFFSET));
    start_time(leader)
}

/// Whether `task` (of process `tgid`) belongs to a target process: the pid is in `TARGETS`
/// with this process's start time (a later process that got the pid is not a target). An
/// entry of 0 (a pid user space named) is claimed by the process that holds the pid.
#[inline(always)]
fn is_target_task(task: *const u8, tgid: u32) -> bool {
    if global(&ALL_TASKS) != 0 {
        return true;
    }
    let Some(entry) = TARGETS.get_ptr_mut(tgid) else {
        return false;
    };
    let started = process_start_time(task);
    // SAFETY: a value of the map; a racing writer stores the same start time.
    unsafe {
        match *entry {
            0 => {
                core::ptr::write_volatile(entry, started);
                true
            }
            known => known == started,
        }
    }
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
    let next_start = start_time(next);

    // SAFETY: per-CPU slot written only by this CPU with preemption off. User space copies
    // it front to back while we may be writing; we write back to front (seq_end, body,
    // seq_begin), so a copy that overlapped a write sees seq_begin != seq_end and retries.
    unsafe {
        let seq = (*state).seq_end.wrapping_add(1);
        core::ptr::write_volatile(&mut (*state).seq_end, seq);
        // prev should be the task this CPU recorded at its previous switch (as next); the
        // runtime it had then is only meaningful in that case. The idle task (tid 0) is never
        // charged: idle time is what remains of an interval.
        if (*state).valid != 0 && prev_tid != 0 {
            let prev_start = start_time(prev);
            let matched = (*state).tid == prev_tid && (*state).start_ns == prev_start;
            if !matched {
                count_loss(|l| l.unmatched_switches += 1);
            }
            let key = ThreadKey {
                tgid: field(prev, global(&TASK_TGID_OFFSET)),
                tid: prev_tid,
                start_ns: prev_start,
            };
            charge(state, prev, key, prev_runtime, matched);
        }
        core::ptr::write_volatile(&mut (*state).start_runtime_ns, next_runtime);
        // Only with function probes (a frozen global: the verifier drops this when 0).
        if global(&functions::FUNC_CLOCK) != 0 {
            core::ptr::write_volatile(&mut (*state).switch_in_ns, bpf_ktime_get_ns());
        }
        core::ptr::write_volatile(&mut (*state).tgid, next_tgid);
        core::ptr::write_volatile(&mut (*state).tid, next_tid);
        core::ptr::write_volatile(&mut (*state).start_ns, next_start);
        if (*state).valid == 0 {
            core::ptr::write_volatile(&mut (*state).valid, 1);
        }
        core::ptr::write_volatile(&mut (*state).seq_begin, seq);
    }
    0
}

/// Charges the thread `key` (the task `task`) leaving this CPU with runtime `runtime_ns`;
/// `matched` when this CPU saw it arrive (its runtime then is `start_runtime_ns`).
#[inline(always)]
unsafe fn charge(
    state: *mut CpuState,
    task: *const u8,
    key: ThreadKey,
    runtime_ns: u64,
    matched: bool,
) {
    unsafe {
        // Only targets hold a cache slot: one that does is a target.
        let mut slot = CACHE_SLOTS;
        for i in 0..CACHE_SLOTS {
            if (*state).cache[i].key == key {
                slot = i;
                break;
            }
        }
        if slot == CACHE_SLOTS && !is_target_task(task, key.tgid) {
            // Other tasks are charged per CPU, from the runtime they had when they arrived.
            if matched {
                let other =
                    (*state).other_ns + runtime_ns.saturating_sub((*state).start_runtime_ns);
                core::ptr::write_volatile(&mut (*state).other_ns, other);
            }
            return;
        }
        // A target: the growth of its runtime since it was last charged, wherever that was.
        let mut init = ThreadMark {
            charged_runtime_ns: ThreadMark::NEW,
        };
        let mark = THREAD_MARKS.get_or_create(task, &mut init);
        let since = if mark.is_null() {
            // No storage (out of memory): what this CPU saw, if it saw the arrival.
            count_loss(|l| l.marks_failed += 1);
            if matched {
                (*state).start_runtime_ns
            } else {
                runtime_ns
            }
        } else if (*mark).charged_runtime_ns != ThreadMark::NEW {
            (*mark).charged_runtime_ns
        } else if matched {
            (*state).start_runtime_ns
        } else if key.start_ns > global(&TRACE_START_NS) {
            // Created while we watched: all of its runtime is its own and uncharged.
            0
        } else {
            // First seen leaving a CPU we did not see it arrive on: its slice is unknown.
            runtime_ns
        };
        if !mark.is_null() {
            core::ptr::write_volatile(&mut (*mark).charged_runtime_ns, runtime_ns);
        }
        let slice_ns = runtime_ns.saturating_sub(since);
        if slice_ns == 0 {
            return;
        }
        if slot < CACHE_SLOTS {
            let cached = &mut (*state).cache[slot];
            core::ptr::write_volatile(&mut cached.pending_ns, cached.pending_ns + slice_ns);
            return;
        }
        // Take the next slot round robin, moving what it held into the map first.
        let index = ((*state).next_slot as usize) % CACHE_SLOTS;
        core::ptr::write_volatile(&mut (*state).next_slot, (*state).next_slot.wrapping_add(1));
        let evicted = (*state).cache[index];
        core::ptr::write_volatile(
            &mut (*state).cache[index],
            CachedTime {
                key,
                pending_ns: slice_ns,
            },
        );
        if evicted.key.tid != 0 && evicted.pending_ns != 0 {
            store(state, evicted);
        }
    }
}

/// Adds a cache slot's pending time to the thread's entry in `ON_CPU`.
#[inline(always)]
unsafe fn store(state: *mut CpuState, cached: CachedTime) {
    let key = cached.key;
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
fn emit(
    kind: u32,
    task: *const u8,
    tgid: u32,
    tid: u32,
    parent_tgid: u32,
    fill: impl FnOnce(&mut LifecycleEvent),
) {
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
        process_start_ns: process_start_time(task),
        thread_start_ns: start_time(task),
        exit_code: 0,
        group_dead: 0,
        // The low 32 bits are the real uid.
        uid: bpf_get_current_uid_gid() as u32,
        reserved: 0,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        filename: [0; cg_common::FILENAME_LEN],
        runtime_ns: 0,
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
    let follow = (spawner != 0 && parent_tgid == spawner) || is_target_task(parent, parent_tgid);
    if !follow {
        return 0;
    }
    // The child leads its new process: its start time is the process's. Any entry left for
    // an earlier process with this pid is replaced.
    if global(&ALL_TASKS) == 0 && TARGETS.insert(child_tgid, start_time(child), 0).is_err() {
        count_loss(|l| l.targets_full += 1);
    }
    emit(
        event_kind::FORK,
        child,
        child_tgid,
        child_tid,
        parent_tgid,
        |_| {},
    );
    0
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    // Arguments: (struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm). Runs in p,
    // after its comm was set to the new program's name.
    let task: *const u8 = ctx.arg(0);
    let tgid: u32 = field(task, global(&TASK_TGID_OFFSET));
    let tid: u32 = field(task, global(&TASK_PID_OFFSET));
    if !is_target_task(task, tgid) {
        return 0;
    }
    let bprm: *const u8 = ctx.arg(2);
    let filename: *const u8 = field(bprm, global(&BINPRM_FILENAME_OFFSET));
    emit(event_kind::EXEC, task, tgid, tid, 0, |event| {
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
    if global(&ITERATOR_MODE) != 0 {
        iterator::note_thread_change(tid, cg_common::thread_change::EXITING);
    }
    if !is_target_task(task, tgid) {
        if global(&ITERATOR_MODE) != 0 {
            iterator::charge_exited_other(task, field(task, global(&TASK_RUNTIME_OFFSET)));
        }
        return 0;
    }
    let group_dead = if global(&EXIT_HAS_GROUP_DEAD) != 0 {
        let flag: u64 = ctx.arg(1);
        u32::from(flag & 0xff != 0)
    } else {
        u32::from(tid == tgid)
    };
    if global(&ITERATOR_MODE) != 0 {
        iterator::mark_exited_target(task);
    }
    let exit_code: u32 = field(task, global(&TASK_EXIT_CODE_OFFSET));
    let runtime_ns: u64 = field(task, global(&TASK_RUNTIME_OFFSET));
    emit(event_kind::EXIT, task, tgid, tid, 0, |event| {
        event.exit_code = exit_code;
        event.group_dead = group_dead;
        event.runtime_ns = runtime_ns;
    });
    0
}

#[btf_tracepoint(function = "sched_process_free")]
pub fn sched_process_free(ctx: BtfTracePointContext) -> i32 {
    // Arguments: (struct task_struct *p). The task is gone for good (after its last switch and
    // after it was reaped). When it led a target process, the pid stops being a target here,
    // whether or not user space saw the exit.
    let task: *const u8 = ctx.arg(0);
    if global(&ITERATOR_MODE) != 0 {
        iterator::charge_freed(task, false);
    }
    if global(&ALL_TASKS) != 0 {
        return 0;
    }
    let tgid: u32 = field(task, global(&TASK_TGID_OFFSET));
    let tid: u32 = field(task, global(&TASK_PID_OFFSET));
    if tid != tgid {
        return 0;
    }
    if let Some(entry) = TARGETS.get_ptr(tgid) {
        // SAFETY: a value of the map, read once.
        let started = unsafe { core::ptr::read_volatile(entry) };
        if started == 0 || started == start_time(task) {
            let _ = TARGETS.remove(tgid);
        }
    }
    0
}

/// Iterator accounting's second way in to a task's free (see [`iterator::charge_freed`]):
/// `__put_task_struct(struct task_struct *t)` runs when the last reference to a task goes,
/// right after `sched_process_free` in the same RCU callback, or later where another holder
/// kept a reference.
#[fentry(function = "__put_task_struct")]
pub fn put_task_struct(ctx: FEntryContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    iterator::charge_freed(task, true);
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
