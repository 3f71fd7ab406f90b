//! Iterator accounting: nothing runs on context switches. User space reads the task iterator
//! `task_runtimes` once per interval; it writes a [`TaskRecord`] (the kernel's own runtime
//! count) for each thread of a target process, or for every thread with `--all`, and charges
//! the runtime growth of every other task since its last visit to `OTHER_RUNTIME`.
//! `sched_process_free` and `__put_task_struct` (in main; two hooks, the first of them does it)
//! close each task's books when it is gone for good: a target's final runtime goes to user
//! space as a FREE event, another task's last growth to `OTHER_RUNTIME` ([`charge_freed`]).

use aya_ebpf::{
    bindings::seq_file, helpers::generated::bpf_seq_write, macros::map, maps::PerCpuArray,
};
use cg_common::{TaskRecord, ThreadMark, event_kind};

use crate::{
    TASK_PID_OFFSET, TASK_RUNTIME_OFFSET, TASK_TGID_OFFSET, THREAD_MARKS, TRACE_START_NS,
    count_loss, emit, field, global, is_target_task, start_time,
};

#[unsafe(no_mangle)]
static TASK_CPU_OFFSET: u32 = 0;

#[unsafe(no_mangle)]
static TASK_EXIT_STATE_OFFSET: u32 = 0;

#[map]
static OTHER_RUNTIME: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The iterator program: `ctx` is a `struct bpf_iter__task { bpf_iter_meta *meta;
/// task_struct *task; }`; `task` is null once after the last task.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn task_runtimes(ctx: *mut core::ffi::c_void) -> i32 {
    let ctx = ctx as *const *const u8;
    // SAFETY: loads of the context's two pointer fields, which the verifier types from BTF.
    let (meta, task) = unsafe {
        (
            core::ptr::read_volatile(ctx),
            core::ptr::read_volatile(ctx.add(1)),
        )
    };
    if task.is_null() {
        return 0;
    }
    let tgid: u32 = field(task, global(&TASK_TGID_OFFSET));
    let runtime_ns: u64 = field(task, global(&TASK_RUNTIME_OFFSET));
    if !is_target_task(task, tgid) {
        charge_other(task, runtime_ns, true);
        return 0;
    }
    // A zombie (exited, not yet reaped) stays in the task list until its parent reaps it,
    // which can be long after user space has closed its books on its EXIT and FREE (or on
    // the wait for them): written again, it would be read as a new thread and its whole
    // runtime charged twice.
    let exit_state: i32 = field(task, global(&TASK_EXIT_STATE_OFFSET));
    if exit_state != 0 {
        return 0;
    }
    let record = TaskRecord {
        tgid,
        tid: field(task, global(&TASK_PID_OFFSET)),
        start_ns: start_time(task),
        runtime_ns,
        cpu: field(task, global(&TASK_CPU_OFFSET)),
        reserved: 0,
    };
    // `meta->seq` is its first field.
    let seq: *mut seq_file = field(meta, 0);
    // SAFETY: the helper copies `size_of::<TaskRecord>()` bytes from the record on our
    // stack. When the seq buffer is full, the kernel shows this task again in the next read.
    unsafe {
        bpf_seq_write(
            seq,
            core::ptr::from_ref(&record).cast(),
            core::mem::size_of::<TaskRecord>() as u32,
        );
    }
    0
}

/// Charges the growth of a non-target task's runtime since it was last charged to
/// `OTHER_RUNTIME`; `create` makes the task's mark when it has none (the iterator; not at
/// free). A task seen first: all of its runtime when it was created after tracing began,
/// none otherwise (what it ran before is no part of the run).
#[inline(always)]
fn charge_other(task: *const u8, runtime_ns: u64, create: bool) {
    let fresh = start_time(task) > global(&TRACE_START_NS);
    let mut init = ThreadMark {
        charged_runtime_ns: ThreadMark::NEW,
    };
    let mark = if create {
        THREAD_MARKS.get_or_create(task, &mut init)
    } else {
        THREAD_MARKS.get(task)
    };
    let since = if mark.is_null() {
        if create {
            count_loss(|l| l.marks_failed += 1);
        }
        if fresh && !create { 0 } else { runtime_ns }
    } else {
        // SAFETY: the task's own storage, which the verifier checked for null above.
        let charged = unsafe { (*mark).charged_runtime_ns };
        if charged != ThreadMark::NEW {
            charged
        } else if fresh {
            0
        } else {
            runtime_ns
        }
    };
    if !mark.is_null() {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(&mut (*mark).charged_runtime_ns, runtime_ns) };
    }
    let grown = runtime_ns.saturating_sub(since);
    if grown == 0 {
        return;
    }
    if let Some(total) = OTHER_RUNTIME.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, written only by this CPU with preemption off.
        unsafe { core::ptr::write_volatile(total, *total + grown) };
    }
}

/// At `sched_process_exit` of a target in iterator accounting: marks the thread so that its
/// free reports it even when its process has left `TARGETS` by then (a thread freed after
/// its group leader).
#[inline(always)]
pub fn mark_exited_target(task: *const u8) {
    let mut init = ThreadMark {
        charged_runtime_ns: ThreadMark::EXITED_TARGET,
    };
    let mark = THREAD_MARKS.get_or_create(task, &mut init);
    if mark.is_null() {
        count_loss(|l| l.marks_failed += 1);
    } else {
        // SAFETY: the task's own storage, checked for null above.
        unsafe {
            core::ptr::write_volatile(&mut (*mark).charged_runtime_ns, ThreadMark::EXITED_TARGET)
        };
    }
}

/// When a task is gone for good in iterator accounting: its runtime is final (it has been
/// switched out for the last time). A target's is reported, another task's growth charged.
///
/// Two hooks call it: `sched_process_free` and, once the task's last reference goes (in the
/// same RCU callback, or later where another holder kept one), an fentry program on
/// `__put_task_struct` (`backup`). The kernel of the development VM now and then calls no
/// handler at that tracepoint for a task (ftrace sees nothing either), while the task is
/// freed all the same. The first hook to come sets the task's mark to `FREE_DONE`, and the
/// other then does nothing. The backup acts only on a task with a mark (an exited target, or
/// another task the iterator charged): one without was never charged, and the tracepoint
/// may have charged it already.
#[inline(always)]
pub fn charge_freed(task: *const u8, backup: bool) {
    let mark = THREAD_MARKS.get(task);
    if backup && mark.is_null() {
        return;
    }
    // SAFETY: the task's own storage, read only when not null.
    let state = (!mark.is_null()).then(|| unsafe { (*mark).charged_runtime_ns });
    if state == Some(ThreadMark::FREE_DONE) {
        return;
    }
    let tgid: u32 = field(task, global(&TASK_TGID_OFFSET));
    let tid: u32 = field(task, global(&TASK_PID_OFFSET));
    let runtime_ns: u64 = field(task, global(&TASK_RUNTIME_OFFSET));
    if state == Some(ThreadMark::EXITED_TARGET) || is_target_task(task, tgid) {
        emit(event_kind::FREE, task, tgid, tid, 0, |event| {
            event.runtime_ns = runtime_ns;
        });
    } else {
        charge_other(task, runtime_ns, false);
    }
    if !mark.is_null() {
        // SAFETY: the task's own storage, checked for null above.
        unsafe {
            core::ptr::write_volatile(&mut (*mark).charged_runtime_ns, ThreadMark::FREE_DONE)
        };
    }
}
