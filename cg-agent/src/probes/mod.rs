//! Probes: loads cg-ebpf into the kernel, attaches it, and turns its maps and events into
//! plain types ([`activity::Snapshot`], [`Lifecycle`], [`Losses`]). Nothing about energy here.
//! The function-level probes (uprobes on chosen functions, the stack sampler) are in
//! [`uprobes`] and [`sampler`] (whose ring a thread empties: `ring_reader`).
//!
//! A running task's `schedstat` (read each interval for the task each CPU runs) is read by
//! hand: 4.8-4.9 µs per read, where procfs 0.17's `Process::new`, `task_from_tid` and
//! `schedstat()` take 58-78 % longer (they open the process's and the task's directories
//! first) (`cargo xtask bench --proc`: release build, this 2-CPU VM's ~100 processes, median of
//! 31 rounds, three runs).

pub mod activity;
mod batch;
pub mod btf;
pub mod features;
mod hidden;
pub mod iterator;
pub mod retry;
mod ring_reader;
pub mod sampler;
mod sys_bpf;
mod task_set;
pub mod task_walk;
mod uprobe_multi;
pub mod uprobes;

use std::{
    os::fd::AsFd,
    time::{Duration, Instant},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, IterableMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePoint, FEntry, Iter},
};
use cg_common::{
    CpuState, LifecycleEvent, LossCounters, ThreadKey, ThreadTime, event_kind, globals, names,
    profiling,
};

use self::activity::{CpuSnapshot, Running, Snapshot};

/// How each thread's CPU time is read (`--accounting`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Accounting {
    /// A task iterator read once per interval: the kernel's own runtime of each thread, and
    /// no program on context switches. It knows where a thread last ran, not where it ran.
    Iterator,
    /// The `sched_switch` program: time per thread per CPU, and when each task got its CPU
    /// (what function probes need).
    #[default]
    Switch,
}

impl Accounting {
    pub fn as_str(self) -> &'static str {
        match self {
            Accounting::Iterator => "iterator",
            Accounting::Switch => "switch",
        }
    }
}

/// What to account and whom to follow.
#[derive(Clone, Debug, Default)]
pub struct ProbeConfig {
    /// How CPU time is read.
    pub accounting: Accounting,
    /// Account every thread of the machine (`--all`).
    pub all_tasks: bool,
    /// New child processes of this tgid become targets (cg-trace itself in wrap mode).
    pub spawner_tgid: Option<u32>,
    /// Processes that are targets from the start (`--pid`).
    pub targets: Vec<u32>,
    /// Attach, but make sched_switch do nothing (`--bench-noop-probes`, for benchmarks).
    pub noop_switch: bool,
    /// Function-level probes to prepare.
    pub functions: FunctionProbeConfig,
    /// Iterator accounting: walk the threads with the `iter/task` program even where the
    /// kernel offers the open-coded walk (the way kernels before 6.7 go; [`ITER_TASK_ENV`]).
    pub iter_task_only: bool,
}

/// Set to 1, iterator accounting reads threads with the `iter/task` program, as on kernels
/// before 6.7 (tests and benchmarks of that path).
pub const ITER_TASK_ENV: &str = "CG_TRACE_ITER_TASK";

/// How iterator accounting walks the threads, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkerUsed {
    /// `task_walk` (the open-coded walk, kernel 6.7+) or `iter_task` (the task iterator).
    pub name: &'static str,
    /// Why `iter_task` serves, when it does.
    pub why: Option<String>,
}

/// Which function-level probes a run uses (their maps are shrunk to nothing otherwise).
#[derive(Clone, Copy, Debug, Default)]
pub struct FunctionProbeConfig {
    /// Uprobes on chosen functions (`--func`); also makes sched_switch note when each task
    /// got its CPU, which the probes' on-CPU clock needs.
    pub uprobes: bool,
    /// The function probes return at once (benchmarks of an empty probe pair).
    pub noop_uprobes: bool,
    /// The stack sampler (`--profile`).
    pub sampling: bool,
    /// Its samples per second per CPU, and how often its maps are read: they are sized
    /// for that.
    pub sample_hz: u64,
    pub interval: Duration,
    /// The sampler also copies each sample's user registers and the top of its user stack
    /// (`--stacks auto|dwarf`), for unwinding without frame pointers.
    pub copy_stacks: bool,
}

/// Errors loading or reading the probes. Their messages carry the whole chain of causes,
/// down to the OS error (aya's own messages stop at "`perf_event_open` failed").
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "reading the kernel's BTF: {0} (cg-trace needs a kernel built with CONFIG_DEBUG_INFO_BTF)"
    )]
    Btf(#[from] btf::BtfError),
    #[error("reading the kernel's BTF for the tracepoints: {}", with_causes(.0))]
    AyaBtf(#[from] aya::BtfError),
    #[error("loading the eBPF programs into the kernel: {}{}", with_causes(.0), permission_hint(.0))]
    Load(#[source] aya::EbpfError),
    #[error("the eBPF object has no program {0}")]
    MissingProgram(&'static str),
    #[error("attaching {program}: {}{}", with_causes(.source), permission_hint(.source))]
    Attach {
        program: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("eBPF map {name}: {}", with_causes(.source))]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error(
        "attaching {program} to {function}: {}{}",
        with_causes(.source),
        permission_hint(.source)
    )]
    AttachFunction {
        program: &'static str,
        function: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("attaching {program} to {function}: {source}")]
    AttachLink {
        program: &'static str,
        function: String,
        #[source]
        source: std::io::Error,
    },
    /// A signal stopped the attaching of the function probes: nothing was traced.
    #[error(
        "interrupted by {} while attaching the function probes ({attached} of {total} \
         functions attached, now detached): nothing was traced and no report written",
        signal_name(*signal)
    )]
    Interrupted {
        signal: i32,
        attached: usize,
        total: usize,
    },
    /// A stop signal came while the programs were being loaded: nothing was traced.
    #[error(
        "interrupted by {} while loading the eBPF programs: nothing was traced and no \
         report written",
        signal_name(*signal)
    )]
    LoadInterrupted { signal: i32 },
    #[error("loading the function probes for uprobe_multi links: {0}")]
    LoadMulti(String),
    #[error("the eBPF object has no map {0}")]
    MissingMap(&'static str),
    #[error(
        "this cg-trace was built without its eBPF programs (cargo feature `ebpf` off): \
         rebuild it with the default features"
    )]
    NoObject,
    /// Running the task iterator failed (with the whole chain of causes).
    #[error("reading the task iterator: {0}")]
    Iterate(String),
    #[error("reading eBPF map {name}: {source}")]
    Read {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("starting the sample ring's reader thread: {0}")]
    RingReader(#[source] std::io::Error),
}

fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        other => format!("signal {other}"),
    }
}

/// An error's message followed by those of its causes that it does not already include,
/// so that the OS error (errno text) shows.
pub fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(err) = cause {
        let more = err.to_string();
        if !more.is_empty() && !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = err.source();
    }
    text
}

/// What to do when the kernel refused for lack of privileges.
fn permission_hint(err: &dyn std::error::Error) -> &'static str {
    let text = with_causes(err);
    if text.contains("os error 1)") {
        " (the kernel refused: run as root, or with CAP_BPF and CAP_PERFMON)"
    } else if text.contains("os error 13)") {
        " (the kernel wants more than CAP_BPF and CAP_PERFMON for this, e.g. CAP_SYS_ADMIN \
         for uprobes (--func): run cg-trace with sudo)"
    } else {
        ""
    }
}

/// A process lifecycle event from the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// A new process (not a thread).
    Fork {
        pid: u32,
        ppid: u32,
        /// The new process's start time (kernel CLOCK_MONOTONIC ns): with the pid, its
        /// identity.
        start_ns: u64,
        timestamp_ns: u64,
    },
    Exec {
        pid: u32,
        comm: String,
        filename: String,
        /// The process's real uid at exec (read in the kernel, so known even when the
        /// process is gone before `/proc` is read).
        uid: u32,
        timestamp_ns: u64,
    },
    /// A thread exited; `process_exited` when it was the last of its process.
    Exit {
        pid: u32,
        tid: u32,
        /// The process's and the thread's start times.
        process_start_ns: u64,
        thread_start_ns: u64,
        comm: String,
        /// The kernel's exit code: `status << 8`, or the signal number.
        exit_code: u32,
        process_exited: bool,
        timestamp_ns: u64,
    },
}

/// What the kernel side could not record, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    /// Target threads whose time could not be stored per thread (map full).
    pub on_cpu_map_full: u64,
    /// Lifecycle events lost because the ring buffer was full.
    pub events_dropped: u64,
    /// Child processes that could not be followed (target map full).
    pub targets_map_full: u64,
    /// Switches the kernel side could not match to the task it saw arrive (a target's slice
    /// is still charged in full; another task's is not).
    pub unmatched_switches: u64,
    /// Target threads the kernel could make no task storage for (their slices are charged
    /// as the CPU saw them).
    pub marks_failed: u64,
    /// Iterator accounting: threads that counted as finished without their final runtime
    /// (no FREE came; each lacks the slice it was running at its exit).
    pub finals_missing: u64,
}

impl Losses {
    pub fn total(&self) -> u64 {
        self.on_cpu_map_full
            + self.events_dropped
            + self.targets_map_full
            + self.unmatched_switches
            + self.marks_failed
            + self.finals_missing
    }
}

/// Iterator accounting's state.
struct IteratorState {
    books: iterator::IteratorBooks,
    /// The kernel's sum of exited other tasks' time.
    other: PerCpuArray<MapData, u64>,
    walker: Walker,
    all_tasks: bool,
}

/// How iterator accounting walks the threads.
enum Walker {
    /// The open-coded walk (kernel 6.7 and later).
    Open(Box<task_walk::TaskWalk>),
    /// The `iter/task` program, and why the open-coded walk does not serve.
    IterTask { why: String },
}

/// Loaded and attached probes. Dropping this detaches and unloads everything.
pub struct Probes {
    // Keeps the programs and their links alive.
    _ebpf: Ebpf,
    on_cpu: PerCpuHashMap<MapData, ThreadKey, ThreadTime>,
    cpu_state: PerCpuArray<MapData, CpuState>,
    targets: HashMap<MapData, u32, u64>,
    events: RingBuf<MapData>,
    losses: PerCpuArray<MapData, LossCounters>,
    /// Maps of the function probes, when used.
    functions: Option<uprobes::FunctionMaps>,
    /// Maps of the stack sampler, when used.
    sampler: Option<sampler::SamplerMaps>,
    /// Batch readers of the per-thread map and of `TARGETS` (each `None` once the kernel
    /// said it has no batch reads of that map: then read entry by entry).
    thread_batch: Option<batch::BatchReader>,
    target_batch: Option<batch::BatchReader>,
    /// Iterator accounting's books and the kernel's sum of other tasks' time (`None` in
    /// switch accounting).
    iterator: Option<IteratorState>,
    /// How long loading and attaching took.
    pub attach_time: Duration,
    /// Iterator accounting: whether the second hook on a task's free (fentry on
    /// `__put_task_struct`) is attached beside `sched_process_free`.
    pub free_backup: bool,
    /// Tasks created after this moment are watched from their first nanosecond.
    trace_start_ns: u64,
}

const UPROBE_MAPS: [&str; 3] = [
    profiling::names::FUNC_THREADS,
    profiling::names::FUNC_STATS,
    "FUNC_ZERO",
];
/// (The sampler's ring buffer is shrunk apart: to a page, its smallest size.)
const SAMPLER_MAPS: [&str; 2] = [profiling::names::PY_PROCS, "PY_TSTATES"];
const UPROBE_MAPS_AND_SAMPLER_MAPS: [&str; 5] = [
    UPROBE_MAPS[0],
    UPROBE_MAPS[1],
    UPROBE_MAPS[2],
    SAMPLER_MAPS[0],
    SAMPLER_MAPS[1],
];

#[cfg(feature = "ebpf")]
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cg-ebpf"));
/// Built without the `ebpf` feature (the fuzz targets): no programs, [`Probes::load`] says so.
#[cfg(not(feature = "ebpf"))]
static EBPF_OBJECT: &[u8] = &[];

/// The lifecycle programs, attached before sched_switch so no process slips through.
const LIFECYCLE: [(&str, &str); 4] = [
    ("sched_process_fork", "sched_process_fork"),
    ("sched_process_exec", "sched_process_exec"),
    ("sched_process_exit", "sched_process_exit"),
    ("sched_process_free", "sched_process_free"),
];
const SWITCH: [(&str, &str); 1] = [("sched_switch", "sched_switch")];

/// Ends loading when `stop()` says a stop signal came (its number).
fn stop_here(stop: &mut dyn FnMut() -> Option<i32>) -> Result<(), ProbeError> {
    match stop() {
        Some(signal) => Err(ProbeError::LoadInterrupted { signal }),
        None => Ok(()),
    }
}

/// Loads one program with `load`, again when a signal interrupts it (see [`retry`]).
fn load_program(
    program: &'static str,
    stop: &mut dyn FnMut() -> Option<i32>,
    load: impl FnMut() -> Result<(), aya::programs::ProgramError>,
) -> Result<(), ProbeError> {
    stop_here(stop)?;
    match retry::again_after_signals(stop, |e| retry::errno_in(e), load) {
        Ok(()) => Ok(()),
        Err(retry::Retried::Stopped(signal)) => Err(ProbeError::LoadInterrupted { signal }),
        Err(retry::Retried::Failed(source)) => Err(ProbeError::Attach { program, source }),
    }
}

/// Where the kernel keeps what the programs read (offsets into `task_struct` and
/// `linux_binprm`, from the kernel's BTF: the object has no CO-RE relocations), and whether
/// its exit tracepoint says when a whole thread group died.
pub(crate) struct KernelLayout {
    /// The `task_struct` offsets every program and the open-coded task walk read.
    task: task_walk::TaskOffsets,
    exit_code: u32,
    filename: u32,
    exit_has_group_dead: u32,
}

impl KernelLayout {
    /// Reads the kernel's BTF, with what the open-coded task walk needs of it (or why it
    /// cannot serve); its copy is freed on return, before aya parses its own (aya's loader
    /// always does).
    pub(crate) fn read()
    -> Result<(Self, Result<task_walk::WalkLayout, task_walk::WalkError>), ProbeError> {
        let btf = btf::Btf::from_sys_fs()?;
        let task = |member| btf.member_offset("task_struct", member);
        let layout = KernelLayout {
            task: task_walk::TaskOffsets {
                pid: task("pid")?,
                tgid: task("tgid")?,
                runtime: btf.member_path_offset("task_struct", &["se", "sum_exec_runtime"])?,
                start_time: task("start_time")?,
                group_leader: task("group_leader")?,
                cpu: task("cpu")
                    .or_else(|_| btf.member_path_offset("task_struct", &["thread_info", "cpu"]))?,
                exit_state: task("exit_state")?,
                flags: task("flags")?,
            },
            exit_code: task("exit_code")?,
            filename: btf.member_offset("linux_binprm", "filename")?,
            exit_has_group_dead: u32::from(
                btf.tracepoint_args("sched_process_exit").unwrap_or(1) >= 2,
            ),
        };
        let walk = task_walk::WalkLayout::read(&btf, layout.task);
        Ok((layout, walk))
    }
}

/// The values the programs' globals take in this run.
struct Globals {
    layout: KernelLayout,
    all_tasks: u32,
    noop_switch: u32,
    spawner: u32,
    /// Tasks created after this moment are watched from their first nanosecond.
    trace_start_ns: u64,
    iterator_mode: u32,
    func_clock: u32,
    noop_func: u32,
    stack_copy: u32,
}

impl Globals {
    fn new(config: &ProbeConfig, layout: KernelLayout, trace_start_ns: u64) -> Self {
        let functions = &config.functions;
        Globals {
            layout,
            all_tasks: u32::from(config.all_tasks),
            noop_switch: u32::from(config.noop_switch),
            spawner: config.spawner_tgid.unwrap_or(0),
            trace_start_ns,
            iterator_mode: u32::from(config.accounting == Accounting::Iterator),
            func_clock: u32::from(functions.uprobes),
            noop_func: u32::from(functions.noop_uprobes),
            stack_copy: u32::from(functions.sampling && functions.copy_stacks),
        }
    }
}

/// The sample ring's size in bytes and how often it must be read, when the run samples.
fn sample_ring(config: &FunctionProbeConfig) -> Option<(u32, Duration)> {
    if !config.sampling {
        return None;
    }
    let cpus = aya::util::nr_cpus().unwrap_or(1);
    let record = sampler::record_bytes(config.copy_stacks);
    let bytes = sampler::ring_bytes(config.sample_hz, cpus, config.interval, record);
    let period = sampler::ring_read_period(config.sample_hz, cpus, record, bytes);
    Some((bytes, period))
}

/// The loader of this run's object: maps it does not use shrunk to nothing, the sample ring
/// `ring_bytes` long (a page when the run does not sample), every global set.
fn loader<'a>(config: &ProbeConfig, globals: &'a Globals, ring_bytes: u32) -> EbpfLoader<'a> {
    // The object has no CO-RE relocations, so the loader needs no kernel BTF.
    let mut loader = EbpfLoader::new();
    // Maps of function-level probes that this run does not use take no kernel memory.
    let unused: &[&str] = match (config.functions.uprobes, config.functions.sampling) {
        (false, false) => &UPROBE_MAPS_AND_SAMPLER_MAPS,
        (false, true) => &UPROBE_MAPS,
        (true, false) => &SAMPLER_MAPS,
        (true, true) => &[],
    };
    for name in unused {
        loader.map_max_entries(name, 1);
    }
    loader.map_max_entries(profiling::names::SAMPLE_RING, ring_bytes);
    let layout = &globals.layout;
    // Every global is a u32 but the clock at the start (u64).
    let u32_globals = [
        (globals::ALL_TASKS, &globals.all_tasks),
        (globals::NOOP_SWITCH, &globals.noop_switch),
        (globals::SPAWNER_TGID, &globals.spawner),
        (globals::TASK_PID_OFFSET, &layout.task.pid),
        (globals::TASK_TGID_OFFSET, &layout.task.tgid),
        (globals::TASK_RUNTIME_OFFSET, &layout.task.runtime),
        (globals::TASK_EXIT_CODE_OFFSET, &layout.exit_code),
        (globals::TASK_START_TIME_OFFSET, &layout.task.start_time),
        (globals::TASK_GROUP_LEADER_OFFSET, &layout.task.group_leader),
        (globals::BINPRM_FILENAME_OFFSET, &layout.filename),
        (globals::EXIT_HAS_GROUP_DEAD, &layout.exit_has_group_dead),
        (globals::ITERATOR_MODE, &globals.iterator_mode),
        (globals::TASK_CPU_OFFSET, &layout.task.cpu),
        (globals::TASK_EXIT_STATE_OFFSET, &layout.task.exit_state),
        (globals::TASK_FLAGS_OFFSET, &layout.task.flags),
        (profiling::globals::FUNC_CLOCK, &globals.func_clock),
        (profiling::globals::NOOP_FUNC, &globals.noop_func),
        (profiling::globals::STACK_COPY, &globals.stack_copy),
    ];
    loader
        .btf(None)
        // THREAD_MARKS is task storage, which only the programs use (aya 0.14 has no
        // user-space type for it).
        .allow_unsupported_maps()
        .override_global(globals::TRACE_START_NS, &globals.trace_start_ns, true);
    for (name, value) in u32_globals {
        loader.override_global(name, value, true);
    }
    loader
}

/// Loads the object into the kernel.
fn load_object(
    loader: &mut EbpfLoader<'_>,
    stop: &mut dyn FnMut() -> Option<i32>,
) -> Result<Ebpf, ProbeError> {
    // aya probes the kernel's features once per process, by loading tiny programs it does
    // not retry: a signal then reads as a missing feature. `cg-trace` has them asked at
    // start-up ([`features::settle`], which starts again after a stop); where that did not
    // run they are asked inside this load. Signals wait while it runs (noted after it, like
    // any other); a stop signal that came all the same (SIGSTOP cannot be held) makes the
    // failure an interruption.
    let loaded = {
        let _held = retry::HeldSignals::hold();
        loader.load(EBPF_OBJECT)
    };
    loaded.map_err(|err| match stop() {
        Some(signal) => ProbeError::LoadInterrupted { signal },
        None => ProbeError::Load(err),
    })
}

/// The maps of CPU-time accounting and process lifecycle, taken from the loaded object.
struct AccountingMaps {
    on_cpu: PerCpuHashMap<MapData, ThreadKey, ThreadTime>,
    cpu_state: PerCpuArray<MapData, CpuState>,
    targets: HashMap<MapData, u32, u64>,
    events: RingBuf<MapData>,
    losses: PerCpuArray<MapData, LossCounters>,
    other_runtime: PerCpuArray<MapData, u64>,
}

impl AccountingMaps {
    /// Takes the maps, and marks `targets` (the processes that are targets from the start).
    fn take(ebpf: &mut Ebpf, targets: &[u32]) -> Result<Self, ProbeError> {
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(ProbeError::MissingMap(name));
        let map_err = |name| move |source| ProbeError::Map { name, source };
        let mut maps = AccountingMaps {
            on_cpu: PerCpuHashMap::try_from(take(names::ON_CPU)?)
                .map_err(map_err(names::ON_CPU))?,
            cpu_state: PerCpuArray::try_from(take(names::CPU_STATE)?)
                .map_err(map_err(names::CPU_STATE))?,
            targets: HashMap::try_from(take(names::TARGETS)?).map_err(map_err(names::TARGETS))?,
            events: RingBuf::try_from(take(names::EVENTS)?).map_err(map_err(names::EVENTS))?,
            losses: PerCpuArray::try_from(take(names::LOSSES)?).map_err(map_err(names::LOSSES))?,
            other_runtime: PerCpuArray::try_from(take(names::OTHER_RUNTIME)?)
                .map_err(map_err(names::OTHER_RUNTIME))?,
        };
        // 0: whichever process holds the pid now (the kernel records its start time at its
        // first switch).
        for &pid in targets {
            maps.targets
                .insert(pid, 0, 0)
                .map_err(map_err(names::TARGETS))?;
        }
        Ok(maps)
    }
}

/// Loads and attaches the lifecycle programs, then sched_switch (switch accounting), and
/// loads the task iterator (iterator accounting, where the open-coded walk does not serve:
/// `iter_task`), or else the hook on threads created that the open-coded walk amends its
/// reads by. Returns whether the second hook on a task's free is attached (iterator
/// accounting, where the kernel allows it), and whether the hook on threads created is.
fn attach_accounting(
    ebpf: &mut Ebpf,
    accounting: Accounting,
    iter_task: bool,
    stop: &mut dyn FnMut() -> Option<i32>,
) -> Result<(bool, bool), ProbeError> {
    // BTF tracepoints are checked against the kernel's BTF at load time. aya parses all of
    // it (tens of MB while it lasts), so do it once, here, and give the memory back after.
    let aya_btf = aya::Btf::from_sys_fs()?;
    let switch: &[(&str, &str)] = match accounting {
        Accounting::Iterator => &[],
        Accounting::Switch => &SWITCH,
    };
    for (program, tracepoint) in LIFECYCLE.iter().chain(switch) {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(program)
            .ok_or(ProbeError::MissingProgram(program))?
            .try_into()
            .map_err(|source| ProbeError::Attach { program, source })?;
        load_program(program, stop, || prog.load(tracepoint, &aya_btf))?;
        prog.attach()
            .map_err(|source| ProbeError::Attach { program, source })?;
    }
    if accounting == Accounting::Iterator && iter_task {
        let program = names::TASK_RUNTIMES;
        let prog = task_iterator(ebpf)?;
        load_program(program, stop, || prog.load("task", &aya_btf))?;
    }
    let free_backup =
        accounting == Accounting::Iterator && attach_free_backup(ebpf, &aya_btf, stop)?;
    let newtask = accounting == Accounting::Iterator
        && !iter_task
        && attach_thread_created(ebpf, &aya_btf, stop)?;
    drop(aya_btf);
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe { libc::malloc_trim(0) };
    Ok((free_backup, newtask))
}

/// The open-coded walk: attaches the hook on threads created (`task_newtask`), which with
/// `sched_process_exit` tells the walk what to amend. Returns whether it is attached; where
/// the kernel refuses it, every read after a thread was created or reaped walks the list.
fn attach_thread_created(
    ebpf: &mut Ebpf,
    btf: &aya::Btf,
    stop: &mut dyn FnMut() -> Option<i32>,
) -> Result<bool, ProbeError> {
    let program = names::TASK_NEWTASK;
    let prog: &mut BtfTracePoint = ebpf
        .program_mut(program)
        .ok_or(ProbeError::MissingProgram(program))?
        .try_into()
        .map_err(|source| ProbeError::Attach { program, source })?;
    match load_program(program, stop, || prog.load("task_newtask", btf)) {
        Ok(()) => Ok(prog.attach().is_ok()),
        Err(ProbeError::Attach { source, .. }) => {
            tracing::debug!("task walk: no amends ({program}: {source})");
            Ok(false)
        }
        Err(other) => Err(other),
    }
}

/// Hands the open-coded walk the ring its amends read and the ring's lost count.
fn follow_thread_changes(
    ebpf: &mut Ebpf,
    walk: &mut task_walk::TaskWalk,
) -> Result<(), ProbeError> {
    let mut take = |name: &'static str| ebpf.take_map(name).ok_or(ProbeError::MissingMap(name));
    let map_err = |name| move |source| ProbeError::Map { name, source };
    let ring =
        RingBuf::try_from(take(names::THREAD_CHANGES)?).map_err(map_err(names::THREAD_CHANGES))?;
    let lost = Array::try_from(take(names::THREAD_CHANGES_LOST)?)
        .map_err(map_err(names::THREAD_CHANGES_LOST))?;
    walk.follow_changes(ring, lost);
    Ok(())
}

/// Iterator accounting: attaches the second hook on a task's free (`__put_task_struct`, see
/// cg-ebpf's `iterator::charge_freed`). A kernel without BPF trampolines refuses it; the run
/// goes on with `sched_process_free` alone, and the report counts the threads that closed
/// without their final runtime. Returns whether it is attached (the report says so).
fn attach_free_backup(
    ebpf: &mut Ebpf,
    btf: &aya::Btf,
    stop: &mut dyn FnMut() -> Option<i32>,
) -> Result<bool, ProbeError> {
    let program = names::PUT_TASK_STRUCT;
    let prog: &mut FEntry = ebpf
        .program_mut(program)
        .ok_or(ProbeError::MissingProgram(program))?
        .try_into()
        .map_err(|source| ProbeError::Attach { program, source })?;
    match load_program(program, stop, || prog.load("__put_task_struct", btf)) {
        Ok(()) => {}
        Err(ProbeError::Attach { .. }) => return Ok(false),
        Err(other) => return Err(other),
    }
    // Unattached, it only costs nothing: the tracepoint still closes each task.
    Ok(prog.attach().is_ok())
}

impl Probes {
    /// Loads the programs, marks the initial targets, and attaches. `stop()` says whether a
    /// stop signal came (its number): asked between steps and when a signal interrupts one,
    /// it ends loading with [`ProbeError::LoadInterrupted`] (what was loaded is unloaded).
    pub fn load(
        config: &ProbeConfig,
        stop: &mut dyn FnMut() -> Option<i32>,
    ) -> Result<Self, ProbeError> {
        if EBPF_OBJECT.is_empty() {
            return Err(ProbeError::NoObject);
        }
        let started = Instant::now();
        let (layout, walk_layout) = KernelLayout::read()?;
        let globals = Globals::new(config, layout, monotonic_ns());
        let ring = sample_ring(&config.functions);
        let ring_bytes = ring.map_or_else(page_size, |(bytes, _)| bytes);
        let mut ebpf = load_object(&mut loader(config, &globals, ring_bytes), stop)?;

        // (Before any map is taken: these programs share every map.)
        stop_here(stop)?;
        let multi = if config.functions.uprobes {
            uprobes::load_multi(&ebpf, stop)?
        } else {
            None
        };
        let maps = AccountingMaps::take(&mut ebpf, &config.targets)?;
        let functions = config
            .functions
            .uprobes
            .then(|| uprobes::FunctionMaps::take(&mut ebpf, multi))
            .transpose()?;
        let sampler = ring
            .map(|(_, read_period)| sampler::SamplerMaps::take(&mut ebpf, read_period))
            .transpose()?;
        let walker = if config.accounting == Accounting::Iterator {
            stop_here(stop)?;
            Some(choose_walker(config, walk_layout, stop)?)
        } else {
            None
        };
        let iter_task = matches!(walker, Some(Walker::IterTask { .. }));
        let (free_backup, newtask) =
            attach_accounting(&mut ebpf, config.accounting, iter_task, stop)?;
        let mut walker = walker;
        if let (true, Some(Walker::Open(walk))) = (newtask, &mut walker) {
            follow_thread_changes(&mut ebpf, walk)?;
        }

        let cpu_count = aya::util::nr_cpus().map_err(|(_, source)| ProbeError::Read {
            name: "/sys/devices/system/cpu/possible",
            source,
        })?;
        // A CPU learns which task it runs at its first switch after attaching; one busy with a
        // single task might not switch for seconds. Make every CPU switch once now.
        if config.accounting == Accounting::Switch {
            switch_every_cpu();
        }
        let iterator = walker.map(|walker| IteratorState {
            books: iterator::IteratorBooks::new(globals.trace_start_ns, cpu_count),
            other: maps.other_runtime,
            walker,
            all_tasks: config.all_tasks,
        });
        Ok(Probes {
            trace_start_ns: globals.trace_start_ns,
            iterator,
            _ebpf: ebpf,
            thread_batch: Some(batch::BatchReader::for_threads(cpu_count)),
            target_batch: Some(batch::BatchReader::for_targets()),
            on_cpu: maps.on_cpu,
            cpu_state: maps.cpu_state,
            targets: maps.targets,
            events: maps.events,
            losses: maps.losses,
            functions,
            sampler,
            attach_time: started.elapsed(),
            free_backup,
        })
    }

    /// Attaches the entry and return probes to every function (`--func`); the probes must
    /// have been loaded with [`FunctionProbeConfig::uprobes`]. `keep_going(done, total)` is
    /// asked between steps; false stops attaching (what was attached stays until drop).
    pub fn attach_functions(
        &mut self,
        functions: &[crate::functions::resolve::ResolvedFunction],
        keep_going: &mut dyn FnMut(usize, usize) -> bool,
    ) -> Result<uprobes::Attached, ProbeError> {
        let started = Instant::now();
        let maps = self
            .functions
            .as_mut()
            .ok_or(ProbeError::MissingMap(profiling::names::FUNC_STATS))?;
        let attached = uprobes::attach(&mut self._ebpf, maps, functions, keep_going)?;
        self.attach_time += started.elapsed();
        Ok(attached)
    }

    /// Starts the stack sampler at `hz` samples per second per CPU (`--profile`); the probes
    /// must have been loaded with [`FunctionProbeConfig::sampling`].
    /// `stop()` as for [`Self::load`].
    pub fn attach_sampler(
        &mut self,
        hz: u64,
        stop: &mut dyn FnMut() -> Option<i32>,
    ) -> Result<(), ProbeError> {
        let started = Instant::now();
        let maps = self
            .sampler
            .as_mut()
            .ok_or(ProbeError::MissingMap(profiling::names::SAMPLE_RING))?;
        sampler::attach(&mut self._ebpf, maps, hz, stop)?;
        self.attach_time += started.elapsed();
        Ok(())
    }

    /// Reads the per-thread totals, then every CPU's state (in that order: see
    /// [`activity`] for why time then only ever shifts forward).
    pub fn snapshot(&mut self) -> Result<Snapshot, ProbeError> {
        if self.iterator.is_some() {
            return self.iterate();
        }
        let fd = IterableMap::map(&self.on_cpu).fd().as_fd();
        let batch = batch::read_or_fall_back(&mut self.thread_batch, |b| b.threads(fd)).map_err(
            |source| ProbeError::Read {
                name: names::ON_CPU,
                source,
            },
        )?;
        let threads = match batch {
            Some(threads) => threads,
            None => self.read_threads_one_by_one()?,
        };
        let cpus = self.read_cpu_states(&threads)?;
        Ok(Snapshot {
            taken_ns: monotonic_ns(),
            cpus,
            threads,
            unfinished: Vec::new(),
        })
    }

    /// Iterator accounting's snapshot: one walk of every thread, then the kernel's sum of
    /// exited other tasks' time, then which processes are targets (read last: a process
    /// that became one during the walk is one in this read).
    fn iterate(&mut self) -> Result<Snapshot, ProbeError> {
        let Some(state) = self.iterator.as_mut() else {
            return Err(ProbeError::MissingProgram(names::TASK_RUNTIMES));
        };
        let records: std::borrow::Cow<'_, [cg_common::TaskRecord]> = match &mut state.walker {
            Walker::Open(walk) => walk
                .walk()
                .map_err(|e| ProbeError::Iterate(with_causes(&e)))?
                .into(),
            Walker::IterTask { .. } => {
                iterator::parse_records(&read_task_iterator(&mut self._ebpf)?).into()
            }
        };
        let taken_ns = monotonic_ns();
        // With `--all` no task is another's: the kernel adds nothing to their sum.
        let exited_ns: u64 = if state.all_tasks {
            0
        } else {
            state
                .other
                .get(&0, 0)
                .map_err(|source| ProbeError::Map {
                    name: names::OTHER_RUNTIME,
                    source,
                })?
                .iter()
                .sum()
        };
        let targets = if state.all_tasks {
            iterator::Targets::All
        } else {
            iterator::Targets::Some(read_targets(&self.targets, &mut self.target_batch)?)
        };
        let (theirs, living_ns) = iterator::split_records(&records, &targets);
        Ok(state
            .books
            .read(&theirs, living_ns.saturating_add(exited_ns), taken_ns))
    }

    /// How the open-coded walk's reads were served so far (`None` without it).
    pub fn walk_reads(&self) -> Option<task_walk::WalkReads> {
        match &self.iterator.as_ref()?.walker {
            Walker::Open(walk) => Some(walk.reads()),
            Walker::IterTask { .. } => None,
        }
    }

    /// How iterator accounting walks the threads (`None` in switch accounting).
    pub fn walker(&self) -> Option<WalkerUsed> {
        self.iterator.as_ref().map(|state| match &state.walker {
            Walker::Open(_) => WalkerUsed {
                name: "task_walk",
                why: None,
            },
            Walker::IterTask { why } => WalkerUsed {
                name: "iter_task",
                why: Some(why.clone()),
            },
        })
    }

    /// Threads whose totals the kernel's maps or the books hold although they are gone and
    /// no exit of theirs came (its event was lost), found now and then. In iterator
    /// accounting the last walk listed every thread alive, so a book it did not see and no
    /// exit closed is one; in switch accounting the snapshot's threads (its map holds them
    /// all) whose `/proc` entry is gone.
    pub fn lost_threads(&self, snapshot: &Snapshot) -> Vec<ThreadKey> {
        match self.iterator.as_ref() {
            Some(state) => state.books.unseen(),
            None => snapshot
                .threads
                .iter()
                .map(|(key, _)| *key)
                .filter(|key| {
                    !std::path::Path::new(&format!("/proc/{}/task/{}", key.tgid, key.tid)).exists()
                })
                .collect(),
        }
    }

    /// Whether iterator accounting still waits for the final runtime of a thread that exited,
    /// or holds one that came after the last read (the next read places it).
    pub fn awaits_final(&self) -> bool {
        self.iterator
            .as_ref()
            .is_some_and(|state| state.books.awaits_final())
    }

    /// How CPU time is read in this run.
    pub fn accounting(&self) -> Accounting {
        if self.iterator.is_some() {
            Accounting::Iterator
        } else {
            Accounting::Switch
        }
    }

    fn read_threads_one_by_one(&self) -> Result<Vec<(ThreadKey, Vec<u64>)>, ProbeError> {
        let mut threads = Vec::new();
        for item in self.on_cpu.iter() {
            let (key, values) = item.map_err(|source| ProbeError::Map {
                name: names::ON_CPU,
                source,
            })?;
            threads.push((key, values.iter().map(|t| t.on_cpu_ns).collect()));
        }
        Ok(threads)
    }

    /// Every CPU's state, with the slice it runs now: the recorded task's, or that of a target
    /// found running unseen where the record is stale (see [`hidden`]). `threads` are the
    /// per-thread totals read just before.
    fn read_cpu_states(
        &self,
        threads: &[(ThreadKey, Vec<u64>)],
    ) -> Result<Vec<CpuSnapshot>, ProbeError> {
        let read = || {
            self.cpu_state.get(&0, 0).map_err(|source| ProbeError::Map {
                name: names::CPU_STATE,
                source,
            })
        };
        // A CPU's state is consistent when seq_begin == seq_end; a few retries find one.
        let mut states: Vec<Option<CpuState>> = Vec::new();
        for _ in 0..8 {
            let values = read()?;
            if states.is_empty() {
                states = vec![None; values.len()];
            }
            for (slot, value) in states.iter_mut().zip(values.iter()) {
                if slot.is_none() && value.seq_begin == value.seq_end {
                    *slot = Some(*value);
                }
            }
            if states.iter().all(Option::is_some) {
                break;
            }
        }
        // The slice each CPU is running, from the task's runtime now. A task that left its
        // CPU between the two reads may have run elsewhere since: its runtime then holds time
        // of another CPU, so the slice is left to the next read (it is charged when the task
        // leaves the CPU anyway).
        let mut in_progress: Vec<Option<u64>> = states
            .iter()
            .enumerate()
            .map(|(cpu, state)| {
                state
                    .filter(|s| s.valid != 0 && s.tid != 0)
                    .and_then(|s| running_since(&s, cpu))
            })
            .collect();
        let mut hidden = self.find_hidden(&states, &in_progress, threads);
        if in_progress.iter().any(Option::is_some) || hidden.iter().any(Option::is_some) {
            let after = read()?;
            for (cpu, now) in after.iter().enumerate() {
                if states[cpu]
                    .is_none_or(|s| s.seq_begin != now.seq_begin || now.seq_begin != now.seq_end)
                {
                    in_progress[cpu] = None;
                    hidden[cpu] = None;
                }
            }
        }
        Ok(states
            .into_iter()
            .zip(in_progress)
            .zip(hidden)
            .map(|((state, in_progress_ns), hidden)| {
                // A CPU that kept changing under us: use its counters, skip its running slice
                // (it shows up in the next read).
                let state = state.unwrap_or_default();
                CpuSnapshot {
                    other_ns: state.other_ns,
                    unstored_ns: state.unstored_ns,
                    cached: state
                        .cache
                        .iter()
                        .filter(|c| c.key.tid != 0 && c.pending_ns != 0)
                        .map(|c| (c.key, c.pending_ns))
                        .collect(),
                    running: match hidden {
                        Some(h) => Some(Running {
                            tgid: h.thread.tgid,
                            tid: h.thread.tid,
                            start_ns: h.thread.start_ns,
                            in_progress_ns: Some(h.in_progress_ns),
                        }),
                        None => (state.valid != 0 && state.tid != 0).then_some(Running {
                            tgid: state.tgid,
                            tid: state.tid,
                            start_ns: state.start_ns,
                            in_progress_ns,
                        }),
                    },
                }
            })
            .collect())
    }

    /// For each CPU whose record names a task not running there (no slice read for it), the
    /// target found running there unseen, if any.
    fn find_hidden(
        &self,
        states: &[Option<CpuState>],
        in_progress: &[Option<u64>],
        threads: &[(ThreadKey, Vec<u64>)],
    ) -> Vec<Option<hidden::Hidden>> {
        let records: Vec<CpuState> = states.iter().map(|s| s.unwrap_or_default()).collect();
        let stale = |cpu: usize| {
            let r = &records[cpu];
            states[cpu].is_some() && r.valid != 0 && r.tid != 0 && in_progress[cpu].is_none()
        };
        if !(0..records.len()).any(stale) {
            return vec![None; states.len()];
        }
        let shown: Vec<ThreadKey> = records
            .iter()
            .zip(in_progress)
            .filter(|(_, slice)| slice.is_some())
            .map(|(r, _)| ThreadKey {
                tgid: r.tgid,
                tid: r.tid,
                start_ns: r.start_ns,
            })
            .collect();
        // Each thread is looked up once per read, however many records are stale.
        let mut looked_up: Vec<(ThreadKey, Option<(usize, u64)>)> = Vec::new();
        let mut lookup = |t: &ThreadKey| {
            if let Some((_, found)) = looked_up.iter().find(|(key, _)| key == t) {
                return *found;
            }
            let found = runtime_on(t.tgid, t.tid);
            looked_up.push((*t, found));
            found
        };
        (0..records.len())
            .map(|cpu| {
                stale(cpu)
                    .then(|| {
                        hidden::find(
                            cpu,
                            &records,
                            threads,
                            self.trace_start_ns,
                            &shown,
                            &mut lookup,
                        )
                    })
                    .flatten()
            })
            .collect()
    }

    /// Takes every lifecycle event the kernel queued since the last call.
    pub fn drain_events(&mut self) -> Vec<Lifecycle> {
        let mut out = Vec::new();
        while let Some(item) = self.events.next() {
            if item.len() < std::mem::size_of::<LifecycleEvent>() {
                continue;
            }
            // SAFETY: the kernel wrote a whole LifecycleEvent (checked length above); the
            // buffer may be unaligned, hence read_unaligned.
            let event: LifecycleEvent =
                unsafe { std::ptr::read_unaligned(item.as_ptr() as *const LifecycleEvent) };
            if let Some(IteratorState { books, .. }) = self.iterator.as_mut() {
                let thread = ThreadKey {
                    tgid: event.tgid,
                    tid: event.tid,
                    start_ns: event.thread_start_ns,
                };
                match event.kind {
                    event_kind::EXIT => books.exited(thread, event.runtime_ns, event.timestamp_ns),
                    event_kind::FREE => books.freed(thread, event.runtime_ns),
                    _ => {}
                }
            }
            if let Some(e) = lifecycle_from(&event) {
                out.push(e);
            }
        }
        out
    }

    /// Sums the loss counters over CPUs, with iterator accounting's count of threads closed
    /// without their final runtime.
    pub fn losses(&self) -> Result<Losses, ProbeError> {
        let values = self.losses.get(&0, 0).map_err(|source| ProbeError::Map {
            name: names::LOSSES,
            source,
        })?;
        let finals_missing = self
            .iterator
            .as_ref()
            .map_or(0, |state| state.books.finals_missing());
        Ok(values.iter().fold(
            Losses {
                finals_missing,
                ..Losses::default()
            },
            |acc, l| Losses {
                on_cpu_map_full: acc.on_cpu_map_full + l.on_cpu_full,
                events_dropped: acc.events_dropped + l.events_dropped,
                targets_map_full: acc.targets_map_full + l.targets_full,
                unmatched_switches: acc.unmatched_switches + l.unmatched_switches,
                marks_failed: acc.marks_failed + l.marks_failed,
                finals_missing: acc.finals_missing,
            },
        ))
    }

    /// Makes the process that holds `pid` now a target from now on.
    pub fn add_target(&mut self, pid: u32) -> Result<(), ProbeError> {
        self.targets
            .insert(pid, 0, 0)
            .map_err(|source| ProbeError::Map {
                name: names::TARGETS,
                source,
            })
    }

    /// Deletes a thread's totals (after its last time was read).
    pub fn delete_thread(&mut self, thread: ThreadKey) {
        match self.iterator.as_mut() {
            Some(state) => state.books.forget(thread),
            None => {
                let _ = self.on_cpu.remove(&thread);
            }
        }
    }
}

fn lifecycle_from(e: &LifecycleEvent) -> Option<Lifecycle> {
    let text = |bytes: &[u8]| {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    };
    match e.kind {
        event_kind::FORK => Some(Lifecycle::Fork {
            pid: e.tgid,
            ppid: e.parent_tgid,
            start_ns: e.process_start_ns,
            timestamp_ns: e.timestamp_ns,
        }),
        event_kind::EXEC => Some(Lifecycle::Exec {
            pid: e.tgid,
            comm: text(&e.comm),
            filename: text(&e.filename),
            uid: e.uid,
            timestamp_ns: e.timestamp_ns,
        }),
        event_kind::EXIT => Some(Lifecycle::Exit {
            pid: e.tgid,
            tid: e.tid,
            process_start_ns: e.process_start_ns,
            thread_start_ns: e.thread_start_ns,
            comm: text(&e.comm),
            exit_code: e.exit_code,
            process_exited: e.group_dead != 0,
            timestamp_ns: e.timestamp_ns,
        }),
        _ => None,
    }
}

/// Chooses how iterator accounting walks the threads: the open-coded walk where the kernel
/// has its kfuncs and takes the program, the `iter/task` program otherwise (or when asked,
/// [`ProbeConfig::iter_task_only`]); the debug log says which, and why.
fn choose_walker(
    config: &ProbeConfig,
    layout: Result<task_walk::WalkLayout, task_walk::WalkError>,
    stop: &mut dyn FnMut() -> Option<i32>,
) -> Result<Walker, ProbeError> {
    if config.iter_task_only {
        return Ok(Walker::IterTask {
            why: format!("{ITER_TASK_ENV}=1"),
        });
    }
    let threads = task_walk::threads_alive().unwrap_or(0);
    match layout.and_then(|layout| task_walk::TaskWalk::new(layout, config.all_tasks, threads)) {
        Ok(walk) => {
            tracing::debug!(
                "iterator accounting: the open-coded task walk ({} records of room)",
                walk.capacity()
            );
            Ok(Walker::Open(Box::new(walk)))
        }
        // EAGAIN or EINTR every time: signals, not the kernel's features.
        Err(task_walk::WalkError::Sys { source, .. })
            if retry::interrupted_by_signal(source.raw_os_error()) =>
        {
            match stop() {
                Some(signal) => Err(ProbeError::LoadInterrupted { signal }),
                None => Err(ProbeError::Iterate(with_causes(&source))),
            }
        }
        Err(refused) => {
            let why = match refused {
                task_walk::WalkError::Unsupported(why) => why,
                other => with_causes(&other),
            };
            tracing::debug!("iterator accounting: the iter/task program ({why})");
            Ok(Walker::IterTask { why })
        }
    }
}

/// The task iterator program (loaded in iterator accounting).
fn task_iterator(ebpf: &mut Ebpf) -> Result<&mut Iter, ProbeError> {
    let program = names::TASK_RUNTIMES;
    ebpf.program_mut(program)
        .ok_or(ProbeError::MissingProgram(program))?
        .try_into()
        .map_err(|source| ProbeError::Attach { program, source })
}

/// `TARGETS` whole: pid -> process start time. In one batch read where the kernel has them
/// for the map (`batch` becomes `None` where it does not), else entry by entry.
fn read_targets(
    map: &HashMap<MapData, u32, u64>,
    batch: &mut Option<batch::BatchReader>,
) -> Result<crate::fast_hash::HashMap<u32, u64>, ProbeError> {
    let fd = map.map().fd().as_fd();
    let read =
        batch::read_or_fall_back(batch, |b| b.targets(fd)).map_err(|source| ProbeError::Read {
            name: names::TARGETS,
            source,
        })?;
    match read {
        Some(targets) => Ok(targets),
        None => map
            .iter()
            .map(|item| {
                item.map_err(|source| ProbeError::Map {
                    name: names::TARGETS,
                    source,
                })
            })
            .collect(),
    }
}

/// Runs the task iterator once: a link made for this pass, its file read to the end, then
/// both closed. A read() returns at most the kernel's seq buffer (8 pages, ~1,000 records)
/// and, asked for less, stops at the first record past what was asked: each read asks for
/// [`ITERATOR_READ_BYTES`], so that the calls are as few as the buffer allows.
fn read_task_iterator(ebpf: &mut Ebpf) -> Result<Vec<u8>, ProbeError> {
    use std::io::Read;
    let prog = task_iterator(ebpf)?;
    let link = prog
        .attach()
        .and_then(|id| prog.take_link(id))
        .map_err(|e| ProbeError::Iterate(with_causes(&e)))?;
    let mut file = link
        .into_file()
        .map_err(|e| ProbeError::Iterate(with_causes(&e)))?;
    let (mut bytes, mut chunk) = (Vec::new(), vec![0u8; ITERATOR_READ_BYTES]);
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(bytes),
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ProbeError::Iterate(with_causes(&e))),
        }
    }
}

/// Bytes asked of the task iterator per read(): more than its seq buffer holds.
const ITERATOR_READ_BYTES: usize = 64 * 1024;

/// Runs a short-lived thread pinned to each online CPU, so that each CPU goes through
/// sched_switch (to the thread and back) and its state describes the task it runs.
fn switch_every_cpu() {
    let Ok(online) = aya::util::online_cpus() else {
        return;
    };
    let threads: Vec<_> = online
        .into_iter()
        .map(|cpu| {
            std::thread::spawn(move || {
                // SAFETY: a zeroed cpu_set_t with one CPU set, for the calling thread.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu as usize, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// How long the task a CPU is running has run since it got the CPU: its `sum_exec_runtime`
/// now (the kernel brings it up to date when schedstat is read) minus its value then. `None`
/// when the task is already gone, or is not running on `cpu` at all: the kernel did not
/// report the switch that took it off (it happens), so the CPU's record is stale and the
/// task's runtime may be growing on another CPU, where it is counted already.
fn running_since(state: &CpuState, cpu: usize) -> Option<u64> {
    let (on, runtime_ns) = runtime_on(state.tgid, state.tid)?;
    (on == cpu).then(|| runtime_ns.saturating_sub(state.start_runtime_ns))
}

/// The CPU a task is runnable on and its `sum_exec_runtime` now; `None` when it is gone or
/// not runnable.
fn runtime_on(tgid: u32, tid: u32) -> Option<(usize, u64)> {
    let task = format!("/proc/{tgid}/task/{tid}");
    let stat = std::fs::read_to_string(format!("{task}/stat")).ok()?;
    let cpu = running_on(&stat)?;
    let text = std::fs::read_to_string(format!("{task}/schedstat")).ok()?;
    Some((cpu, parse_schedstat_runtime_ns(&text)?))
}

/// From `/proc/PID/task/TID/stat`: the CPU the task is running on, `None` unless it is
/// running (state `R`). The command name may hold anything, parentheses included: the
/// fields are counted from the last `)`.
pub fn running_on(stat: &str) -> Option<usize> {
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .take(40)
        .collect();
    // state is field 3 of stat, processor field 39.
    if fields.first() != Some(&"R") {
        return None;
    }
    fields.get(36)?.parse().ok()
}

/// `/proc/PID/task/TID/schedstat` (`run_ns wait_ns timeslices`): the task's `sum_exec_runtime`.
pub fn parse_schedstat_runtime_ns(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The memory page size (a ring buffer's smallest size).
fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).unwrap_or(4096).max(4096)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock `bpf_ktime_get_ns` uses.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> KernelLayout {
        KernelLayout {
            task: task_walk::TaskOffsets {
                pid: 1,
                tgid: 2,
                runtime: 3,
                start_time: 5,
                group_leader: 6,
                cpu: 8,
                exit_state: 9,
                flags: 10,
            },
            exit_code: 4,
            filename: 7,
            exit_has_group_dead: 1,
        }
    }

    #[test]
    fn the_programs_globals_say_what_the_run_asked_for() {
        let config = ProbeConfig {
            accounting: Accounting::Iterator,
            all_tasks: true,
            spawner_tgid: Some(77),
            functions: FunctionProbeConfig {
                // Stacks are copied only for the sampler.
                copy_stacks: true,
                ..FunctionProbeConfig::default()
            },
            ..ProbeConfig::default()
        };
        let g = Globals::new(&config, layout(), 99);
        assert_eq!(
            (g.all_tasks, g.noop_switch, g.spawner, g.iterator_mode),
            (1, 0, 77, 1)
        );
        assert_eq!((g.func_clock, g.noop_func, g.stack_copy), (0, 0, 0));
        assert_eq!((g.trace_start_ns, g.layout.task.cpu), (99, 8));
        let config = ProbeConfig {
            functions: FunctionProbeConfig {
                uprobes: true,
                sampling: true,
                copy_stacks: true,
                ..FunctionProbeConfig::default()
            },
            ..ProbeConfig::default()
        };
        let g = Globals::new(&config, layout(), 0);
        assert_eq!(
            (
                g.all_tasks,
                g.spawner,
                g.iterator_mode,
                g.func_clock,
                g.stack_copy
            ),
            (0, 0, 0, 1, 1)
        );
    }

    #[test]
    fn knows_where_a_task_runs_from_its_stat() {
        let running = "4242 (cg (spin) R) R 1 4242 4242 0 -1 4194304 100 0 0 0 300 2 0 0 20 0 \
                       1 0 5000 2000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 \
                       0 0 0 0 0";
        assert_eq!(running_on(running), Some(1));
        let sleeping = running.replacen(") R 1", ") S 1", 1);
        assert_eq!(running_on(&sleeping), None);
        assert_eq!(running_on("4242 (cut) R 1 2"), None);
        assert_eq!(running_on("garbage"), None);
    }

    #[test]
    fn reads_the_runtime_from_schedstat() {
        assert_eq!(
            parse_schedstat_runtime_ns("1234567 89 10\n"),
            Some(1_234_567)
        );
        assert_eq!(parse_schedstat_runtime_ns("x 1 2"), None);
    }
}
