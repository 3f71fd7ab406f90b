//! Iterator accounting: nothing runs on context switches. User space walks the task list once
//! per interval, either with its own open-coded walk (kernel 6.7+, assembled in user space)
//! or with the task iterator `task_runtimes` here; each writes a [`TaskRecord`] (the kernel's
//! own runtime count) for every thread, and user space tells targets' threads from others
//! and sums the living others' runtimes. What exited tasks other than targets ran, the hooks
//! add to `OTHER_RUNTIME`: their runtime at `sched_process_exit` ([`charge_exited_other`]),
//! and what they ran after it once they are freed ([`charge_freed`], called by
//! `sched_process_free` and `__put_task_struct`, the first of them does it). A target's final
//! runtime goes to user space as a FREE event.

use aya_ebpf::{
    bindings::seq_file,
    helpers::generated::{bpf_ktime_get_ns, bpf_seq_write},
    macros::{btf_tracepoint, map},
    maps::{Array, PerCpuArray, RingBuf},
    programs::BtfTracePointContext,
};
use cg_common::{
    THREAD_CHANGES_RING_BYTES, TaskRecord, ThreadChange, ThreadMark, event_kind, thread_change,
};

use crate::{
    ALL_TASKS, TASK_PID_OFFSET, TASK_RUNTIME_OFFSET, TASK_TGID_OFFSET, THREAD_MARKS, count_loss,
    emit, field, global, is_target_task, process_start_time, start_time,
};

#[unsafe(no_mangle)]
static TASK_CPU_OFFSET: u32 = 0;

#[unsafe(no_mangle)]
static TASK_EXIT_STATE_OFFSET: u32 = 0;

#[unsafe(no_mangle)]
static TASK_FLAGS_OFFSET: u32 = 0;

#[map]
static OTHER_RUNTIME: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[map]
static THREAD_CHANGES: RingBuf = RingBuf::with_byte_size(THREAD_CHANGES_RING_BYTES, 0);

#[map]
static THREAD_CHANGES_LOST: Array<u64> = Array::with_max_entries(1, 0);

/// Writes that thread `tid` was created or began to exit (a [`thread_change`] kind), with
/// the time; where the ring is full, counts the loss instead (user space only asks whether
/// the count moved, so a racing increment lost does not matter: the other one moved it).
#[inline(always)]
pub fn note_thread_change(tid: u32, kind: u32) {
    let Some(mut entry) = THREAD_CHANGES.reserve::<ThreadChange>(0) else {
        if let Some(lost) = THREAD_CHANGES_LOST.get_ptr_mut(0) {
            // SAFETY: the map's one value, written with a plain increment (see above).
            unsafe { core::ptr::write_volatile(lost, core::ptr::read_volatile(lost) + 1) };
        }
        return;
    };
    entry.write(ThreadChange {
        tid,
        kind,
        // SAFETY: a helper without arguments.
        at_ns: unsafe { bpf_ktime_get_ns() },
    });
    entry.submit(0);
}

/// A thread was created: `task_newtask(struct task_struct *task, u64 clone_flags)`, at the
/// end of `copy_process`, after the thread joined the task list and `total_forks` counted it.
/// Loaded only where the open-coded walk runs.
#[btf_tracepoint(function = "task_newtask")]
pub fn task_newtask(ctx: BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    note_thread_change(
        field(task, global(&TASK_PID_OFFSET)),
        thread_change::CREATED,
    );
    0
}

/// The iterator program: `ctx` is a `struct bpf_iter__task { bpf_iter_meta *meta;
/// task_struct *task; }`; `task` is null once after the last task. Writes every thread's
/// record; with `--all` every thread is a target's, and its process's start time, which
/// tells them apart, is left 0.
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
    let all = global(&ALL_TASKS) != 0;
    let record = TaskRecord {
        tgid: field(task, global(&TASK_TGID_OFFSET)),
        tid: field(task, global(&TASK_PID_OFFSET)),
        start_ns: start_time(task),
        runtime_ns: field(task, global(&TASK_RUNTIME_OFFSET)),
        cpu: field(task, global(&TASK_CPU_OFFSET)),
        exit_state: field(task, global(&TASK_EXIT_STATE_OFFSET)),
        process_start_ns: if all { 0 } else { process_start_time(task) },
        task_flags: field(task, global(&TASK_FLAGS_OFFSET)),
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

/// Adds `ns` to the per-CPU sum of exited other tasks' time.
#[inline(always)]
fn add_other(ns: u64) {
    if ns == 0 {
        return;
    }
    if let Some(total) = OTHER_RUNTIME.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, written only by this CPU with preemption off.
        unsafe { core::ptr::write_volatile(total, *total + ns) };
    }
}

/// At `sched_process_exit` of a thread that is not a target's (iterator accounting, not
/// `--all`): its runtime so far joins the exited others' sum, and its mark keeps that figure
/// for its free, which adds what it ran after. From its exit on, user space leaves it out of
/// the living others' sum (the walk shows it with `PF_EXITING`, set before this hook runs),
/// so nothing is counted twice. Without a mark (out of memory) the few microseconds between
/// exit and its last switch go uncounted.
#[inline(always)]
pub fn charge_exited_other(task: *const u8, runtime_ns: u64) {
    add_other(runtime_ns);
    let mut init = ThreadMark {
        charged_runtime_ns: runtime_ns,
    };
    let mark = THREAD_MARKS.get_or_create(task, &mut init);
    if mark.is_null() {
        count_loss(|l| l.marks_failed += 1);
    } else {
        // SAFETY: the task's own storage, checked for null above.
        unsafe { core::ptr::write_volatile(&mut (*mark).charged_runtime_ns, runtime_ns) };
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
/// switched out for the last time). A target's is reported; another task whose exit was
/// charged ([`charge_exited_other`]) has what it ran since added to `OTHER_RUNTIME`.
///
/// Two hooks call it: `sched_process_free` and, once the task's last reference goes (in the
/// same RCU callback, or later where another holder kept one), an fentry program on
/// `__put_task_struct` (`backup`). The kernel of the development VM now and then calls no
/// handler at that tracepoint for a task (ftrace sees nothing either), while the task is
/// freed all the same. The first hook to come sets the task's mark to `FREE_DONE`, and the
/// other then does nothing. The backup acts only on a task with a mark (an exited target, or
/// another task whose exit was charged): one without was never charged, and the tracepoint
/// may have reported it already.
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
    match state {
        Some(ThreadMark::EXITED_TARGET) => emit_free(task, tgid, tid, runtime_ns),
        Some(charged) if charged != ThreadMark::NEW => {
            add_other(runtime_ns.saturating_sub(charged));
        }
        // No mark: a task whose exit no hook of ours saw (it exited before tracing began),
        // or a target whose mark could not be made.
        _ if is_target_task(task, tgid) => emit_free(task, tgid, tid, runtime_ns),
        _ => {}
    }
    if !mark.is_null() {
        // SAFETY: the task's own storage, checked for null above.
        unsafe {
            core::ptr::write_volatile(&mut (*mark).charged_runtime_ns, ThreadMark::FREE_DONE)
        };
    }
}

#[inline(always)]
fn emit_free(task: *const u8, tgid: u32, tid: u32, runtime_ns: u64) {
    emit(event_kind::FREE, task, tgid, tid, 0, |event| {
        event.runtime_ns = runtime_ns;
    });
}
