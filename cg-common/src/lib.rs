//! Types shared by the eBPF programs (cg-ebpf) and the user-space agent (cg-agent).
//!
//! Everything here is `#[repr(C)]`, `Copy`, free of `bool` and of implicit padding, so the
//! kernel and user sides agree on every byte; the `const` assertions keep the sizes in step.
#![no_std]

use core::mem::size_of;

pub mod profiling;

/// Names of the maps and globals in the eBPF object, so both sides spell them the same way.
pub mod names {
    /// Per-CPU hash: [`ThreadKey`](super::ThreadKey) -> [`ThreadTime`](super::ThreadTime).
    pub const ON_CPU: &str = "ON_CPU";
    /// Per-CPU array of one [`CpuState`](super::CpuState).
    pub const CPU_STATE: &str = "CPU_STATE";
    /// Hash: tgid -> the process's start time (its leader's `task_struct.start_time`, 0 =
    /// whichever process holds the pid now) for every process whose threads are accounted
    /// one by one. A process that reuses the pid of a target is not one.
    pub const TARGETS: &str = "TARGETS";
    /// Task storage: [`ThreadMark`](super::ThreadMark) of every accounted thread.
    pub const THREAD_MARKS: &str = "THREAD_MARKS";
    /// Ring buffer of [`LifecycleEvent`](super::LifecycleEvent)s.
    pub const EVENTS: &str = "EVENTS";
    /// Per-CPU array of one [`LossCounters`](super::LossCounters).
    pub const LOSSES: &str = "LOSSES";
    /// Per-CPU array of one `u64` (iterator accounting): nanoseconds that exited tasks other
    /// than targets ran, summed over the CPUs' slots: each one's runtime at
    /// `sched_process_exit`, and what it ran after that when its free is seen. The living
    /// ones' time user space sums from the walk's records.
    pub const OTHER_RUNTIME: &str = "OTHER_RUNTIME";
    /// The task iterator program (`iter/task`): one [`TaskRecord`](super::TaskRecord) per
    /// thread.
    pub const TASK_RUNTIMES: &str = "task_runtimes";
    /// The fentry program on `__put_task_struct` (iterator accounting): a second way in to a
    /// task's free, beside `sched_process_free`.
    pub const PUT_TASK_STRUCT: &str = "put_task_struct";
    /// Ring buffer of [`ThreadChange`](super::ThreadChange)s (iterator accounting): every
    /// thread of the machine created or exiting, for the open-coded walk to amend its last
    /// walk's threads by instead of walking the list again.
    pub const THREAD_CHANGES: &str = "THREAD_CHANGES";
    /// Array of one `u64`: grows when a [`ThreadChange`](super::ThreadChange) could not be
    /// written (ring full); the walk then follows the list.
    pub const THREAD_CHANGES_LOST: &str = "THREAD_CHANGES_LOST";
    /// The BTF tracepoint program on `task_newtask` (iterator accounting): a thread created.
    pub const TASK_NEWTASK: &str = "task_newtask";
}

/// Globals that user space sets at load time (`EbpfLoader::override_global`).
pub mod globals {
    /// `u32`: 1 to account every thread of the machine (`--all`), 0 to account targets only.
    pub const ALL_TASKS: &str = "ALL_TASKS";
    /// `u32`: 1 makes `sched_switch` return at once (benchmarks measure the cost of merely
    /// having a program on the hook this way); never set in normal runs.
    pub const NOOP_SWITCH: &str = "NOOP_SWITCH";
    /// `u32`: tgid whose new child processes become targets (cg-trace itself in wrap mode), 0 = none.
    pub const SPAWNER_TGID: &str = "SPAWNER_TGID";
    /// `u32`: byte offset of `task_struct.pid`, read from the kernel's BTF.
    pub const TASK_PID_OFFSET: &str = "TASK_PID_OFFSET";
    /// `u32`: byte offset of `task_struct.tgid`.
    pub const TASK_TGID_OFFSET: &str = "TASK_TGID_OFFSET";
    /// `u32`: byte offset of `task_struct.se.sum_exec_runtime` (the kernel's own count of a
    /// task's CPU nanoseconds, updated whenever the task leaves a CPU).
    pub const TASK_RUNTIME_OFFSET: &str = "TASK_RUNTIME_OFFSET";
    /// `u32`: byte offset of `task_struct.start_time` (CLOCK_MONOTONIC ns when the task was
    /// created: with the pid, it names a task even when the pid is reused).
    pub const TASK_START_TIME_OFFSET: &str = "TASK_START_TIME_OFFSET";
    /// `u32`: byte offset of `task_struct.group_leader`.
    pub const TASK_GROUP_LEADER_OFFSET: &str = "TASK_GROUP_LEADER_OFFSET";
    /// `u64`: CLOCK_MONOTONIC ns just before the programs were attached: a task created later
    /// was watched all its life.
    pub const TRACE_START_NS: &str = "TRACE_START_NS";
    /// `u32`: byte offset of `task_struct.exit_code`.
    pub const TASK_EXIT_CODE_OFFSET: &str = "TASK_EXIT_CODE_OFFSET";
    /// `u32`: byte offset of `linux_binprm.filename`.
    pub const BINPRM_FILENAME_OFFSET: &str = "BINPRM_FILENAME_OFFSET";
    /// `u32`: 1 when `sched_process_exit` passes `group_dead` (Linux 6.16 and later).
    pub const EXIT_HAS_GROUP_DEAD: &str = "EXIT_HAS_GROUP_DEAD";
    /// `u32`: 1 in iterator accounting (no program on context switches): `sched_process_free`
    /// reports each target thread's final runtime ([`FREE`](super::event_kind::FREE));
    /// `sched_process_exit` and `sched_process_free` add other tasks' runtime to
    /// `OTHER_RUNTIME` as they go.
    pub const ITERATOR_MODE: &str = "ITERATOR_MODE";
    /// `u32`: byte offset of `task_struct.cpu` (the CPU the task last ran on).
    pub const TASK_CPU_OFFSET: &str = "TASK_CPU_OFFSET";
    /// `u32`: byte offset of `task_struct.exit_state` (non-zero once the task is a zombie or
    /// dead: the task iterator skips such a target thread, whose books its EXIT and FREE
    /// close).
    pub const TASK_EXIT_STATE_OFFSET: &str = "TASK_EXIT_STATE_OFFSET";
    /// `u32`: byte offset of `task_struct.flags` (`PF_EXITING` once the thread began to exit).
    pub const TASK_FLAGS_OFFSET: &str = "TASK_FLAGS_OFFSET";
}

/// Default capacity of [`names::ON_CPU`]: threads (of targets, or of the whole machine with
/// `--all`) that can be accounted at once. User space may resize it at load time.
pub const ON_CPU_MAX_THREADS: u32 = 16_384;
/// Default capacity of [`names::TARGETS`].
pub const TARGETS_MAX_PROCESSES: u32 = 8_192;
/// Size of the lifecycle event ring buffer in bytes (a power of two, multiple of the page size).
pub const EVENTS_RING_BYTES: u32 = 1024 * 1024;
/// Bytes of the [`names::THREAD_CHANGES`] ring: 16,384 changes between two reads.
pub const THREAD_CHANGES_RING_BYTES: u32 = 256 * 1024;
/// Length of a task's `comm` in the kernel.
pub const COMM_LEN: usize = 16;
/// Bytes of an exec'd file name kept in an [`LifecycleEvent`].
pub const FILENAME_LEN: usize = 128;

/// A thread: its process (tgid), itself (tid, the kernel's `pid`) and when it was created
/// (`task_struct.start_time`), so that a thread id the kernel reuses is another thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadKey {
    pub tgid: u32,
    pub tid: u32,
    pub start_ns: u64,
}
const _: () = assert!(size_of::<ThreadKey>() == 16);

/// What the kernel side keeps per accounted thread, in task storage (freed with the task):
/// the thread's `se.sum_exec_runtime` when it was last charged. A slice is the growth of the
/// runtime since then, so a context switch the kernel never reported loses nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadMark {
    /// [`ThreadMark::NEW`] until the thread is first charged.
    pub charged_runtime_ns: u64,
}
const _: () = assert!(size_of::<ThreadMark>() == 8);

impl ThreadMark {
    /// A mark not yet charged.
    pub const NEW: u64 = u64::MAX;
    /// Iterator accounting: a target thread that exited, whose final runtime
    /// `sched_process_free` reports (whether or not its process is still in `TARGETS` then).
    pub const EXITED_TARGET: u64 = u64::MAX - 1;
    /// Iterator accounting: the task's final runtime was reported (a target) or charged
    /// (another task) by one of the two hooks on its free; the other leaves it alone.
    pub const FREE_DONE: u64 = u64::MAX - 2;
}

/// Cumulative on-CPU time of one thread on one CPU (the map is per-CPU, so each CPU owns its
/// slot and the kernel side needs no atomics).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadTime {
    /// Nanoseconds the thread spent on this CPU, up to its last switch-out (except what the
    /// CPU's [`CpuState::cache`] still holds for it).
    pub on_cpu_ns: u64,
}
const _: () = assert!(size_of::<ThreadTime>() == 8);

/// Slots of the per-CPU cache of target threads' pending time.
pub const CACHE_SLOTS: usize = 4;

/// Time a CPU charged to a target thread and has not yet added to `ON_CPU`: a CPU switching
/// among a few threads updates these instead of the hash map, and moves a slot's time into
/// the map only when the slot is needed for another thread. `tid == 0` marks a free slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachedTime {
    pub key: ThreadKey,
    pub pending_ns: u64,
}
const _: () = assert!(size_of::<CachedTime>() == 24);

/// What one CPU is running now, plus cumulative counters for time not charged to a target.
///
/// Slice lengths come from the kernel's own `se.sum_exec_runtime` (exact, and no clock read
/// per switch); user space reads the slice still running from the same counter in
/// `/proc/PID/task/TID/schedstat`, and a CPU's idle time is what remains of an interval.
/// User space copies it front to back while the kernel may be writing it; the kernel writes
/// back to front: `seq_end`, the body, then `seq_begin` with the same new value. A copy that
/// overlapped a write sees `seq_begin != seq_end` and is taken again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    pub seq_begin: u64,
    /// The current task's `se.sum_exec_runtime` when it got this CPU.
    pub start_runtime_ns: u64,
    /// The task on this CPU now (tgid 0 and tid 0: the idle task).
    pub tgid: u32,
    pub tid: u32,
    /// Its `task_struct.start_time`.
    pub start_ns: u64,
    /// Cumulative time non-target tasks ran here.
    pub other_ns: u64,
    /// Cumulative time of targets that could not be stored because `ON_CPU` was full.
    pub unstored_ns: u64,
    /// 1 once a switch was seen on this CPU (the fields above then describe a real task).
    pub valid: u32,
    /// The cache slot to reuse next (round robin).
    pub next_slot: u32,
    pub cache: [CachedTime; CACHE_SLOTS],
    /// CLOCK_MONOTONIC ns when the current task got this CPU; only kept when function
    /// probes run (see [`profiling::globals::FUNC_CLOCK`]), 0 otherwise.
    pub switch_in_ns: u64,
    pub seq_end: u64,
}
const _: () = assert!(size_of::<CpuState>() == 72 + 24 * CACHE_SLOTS);

/// Counters of what the kernel side could not record, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossCounters {
    /// `ON_CPU` inserts that failed (map full): that time went to `CpuState::unstored_ns`.
    pub on_cpu_full: u64,
    /// Lifecycle events dropped because the ring buffer was full.
    pub events_dropped: u64,
    /// Child processes that could not be added to `TARGETS` (map full).
    pub targets_full: u64,
    /// Switches whose outgoing task was not the one this CPU recorded at its previous switch
    /// (a switch the program did not see). A target's slice is still charged in full (it is
    /// the growth of its runtime since it was last charged); another task's goes uncharged.
    pub unmatched_switches: u64,
    /// Target threads for which no task storage could be made (out of memory): their slices
    /// are charged as this CPU saw them, as without marks.
    pub marks_failed: u64,
}
const _: () = assert!(size_of::<LossCounters>() == 40);

/// What a walk of the task list writes for each thread (the `iter/task` program, or the
/// open-coded walk user space assembles): the kernel's own count of its CPU time, read once
/// per interval, and what user space needs to tell a target's thread from another.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskRecord {
    pub tgid: u32,
    pub tid: u32,
    /// `task_struct.start_time`: with tgid and tid, the thread's [`ThreadKey`].
    pub start_ns: u64,
    /// `se.sum_exec_runtime`: nanoseconds the thread has run, up to the scheduler's last
    /// update of it (at a switch or a tick).
    pub runtime_ns: u64,
    /// The CPU it last ran on (`task_struct.cpu`).
    pub cpu: u32,
    /// `task_struct.exit_state`: non-zero once the thread is a zombie or dead.
    pub exit_state: u32,
    /// The start time of its process (the group leader's `start_time`), checked against
    /// `TARGETS`; 0 with `--all` (every thread is a target's).
    pub process_start_ns: u64,
    /// `task_struct.flags` (`PF_EXITING`: the thread began to exit).
    pub task_flags: u32,
    /// Always 0 (no implicit padding).
    pub reserved: u32,
}
const _: () = assert!(size_of::<TaskRecord>() == 48);

impl TaskRecord {
    /// `PF_EXITING` in [`TaskRecord::task_flags`] (include/linux/sched.h).
    pub const PF_EXITING: u32 = 0x4;
    /// [`TaskRecord::exit_state`] of a vacant record (no thread).
    pub const VACANT: u32 = u32::MAX;

    /// A vacant record: where an amended walk's thread was reaped. It holds no thread and no
    /// time, and reads as an exited one everywhere (an exit state, `PF_EXITING`), so the rules
    /// for those leave it out.
    pub const fn vacant() -> Self {
        TaskRecord {
            tgid: 0,
            tid: 0,
            start_ns: 0,
            runtime_ns: 0,
            cpu: 0,
            exit_state: Self::VACANT,
            process_start_ns: 0,
            task_flags: Self::PF_EXITING,
            reserved: 0,
        }
    }

    pub const fn is_vacant(&self) -> bool {
        self.exit_state == Self::VACANT
    }
}

/// Kinds of [`ThreadChange`].
pub mod thread_change {
    /// A thread was created (`task_newtask`).
    pub const CREATED: u32 = 1;
    /// A thread began to exit (`sched_process_exit`).
    pub const EXITING: u32 = 2;
}

/// A thread of the machine created or exiting, with when (CLOCK_MONOTONIC ns, taken in the
/// hook).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadChange {
    pub tid: u32,
    /// One of [`thread_change`].
    pub kind: u32,
    pub at_ns: u64,
}
const _: () = assert!(size_of::<ThreadChange>() == 16);

/// Kinds of [`LifecycleEvent`].
pub mod event_kind {
    /// A new process (not a thread) was forked: `tgid`/`tid` are the child, `parent_tgid` its parent.
    pub const FORK: u32 = 1;
    /// A process called exec: `comm` and `filename` are the new program.
    pub const EXEC: u32 = 2;
    /// A thread exited; `group_dead` is 1 when it was the last thread of its process.
    pub const EXIT: u32 = 3;
    /// A target thread is gone for good (iterator accounting only): `runtime_ns` is its final
    /// runtime, after its last switch.
    pub const FREE: u32 = 4;
}

/// A process lifecycle event, for targets only (every task with `--all`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LifecycleEvent {
    pub kind: u32,
    pub tgid: u32,
    pub tid: u32,
    pub parent_tgid: u32,
    pub timestamp_ns: u64,
    /// The process's start time (its leader's `task_struct.start_time`): with the tgid it
    /// names the process even when the pid is reused.
    pub process_start_ns: u64,
    /// The thread's own start time (`tid`'s).
    pub thread_start_ns: u64,
    /// `task_struct.exit_code` at exit: `(status << 8)` for exit(status), or the signal number.
    pub exit_code: u32,
    /// 1 when the whole process died with this thread (EXIT only).
    pub group_dead: u32,
    /// The real uid of the task the event ran in (`bpf_get_current_uid_gid`): at EXEC the
    /// process's own, read before it can exit; at FORK the parent's, which the child shares.
    pub uid: u32,
    /// Keeps `comm` 8-byte aligned with no implicit padding; always 0.
    pub reserved: u32,
    pub comm: [u8; COMM_LEN],
    pub filename: [u8; FILENAME_LEN],
    /// The thread's `se.sum_exec_runtime`: at EXIT as the scheduler last updated it (the
    /// slice it is running is not in it yet), at FREE its final runtime; 0 otherwise.
    pub runtime_ns: u64,
}
const _: () = assert!(size_of::<LifecycleEvent>() == 64 + COMM_LEN + FILENAME_LEN);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are `repr(C)`, `Copy`, and have no padding or invalid bit patterns.
    unsafe impl aya::Pod for super::ThreadKey {}
    unsafe impl aya::Pod for super::ThreadMark {}
    unsafe impl aya::Pod for super::ThreadTime {}
    unsafe impl aya::Pod for super::CachedTime {}
    unsafe impl aya::Pod for super::CpuState {}
    unsafe impl aya::Pod for super::LossCounters {}
    unsafe impl aya::Pod for super::LifecycleEvent {}
    unsafe impl aya::Pod for super::TaskRecord {}
}
