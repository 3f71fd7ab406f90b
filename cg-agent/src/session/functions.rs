//! Function-level profiling during a run: resolves `--func` SPECs and attaches the probes
//! before the command starts, then once per interval reads what the function probes and the
//! sampler aggregated in the kernel, turns it into per-interval [`FunctionInterval`]s keyed
//! by process, and keeps what symbolization needs while the processes still exist (their
//! memory maps, the names of Python code objects). At the end it names every stack.
//!
//! A `--func` SPEC whose library was found nowhere at the start (one a program loads with
//! `dlopen` from its own directory) waits: at each interval the files the live targets have
//! mapped since are matched against it, and the functions of a matching file are probed
//! then (by file and offset, so in every process that maps it).
//!
//! Probed functions: the kernel keeps cumulative per-thread totals of completed calls; calls
//! still running are added from the threads' entry stacks and the threads' CPU clocks
//! (`/proc/PID/task/TID/schedstat`), and a high-water mark keeps each function's reported
//! time from ever going back. So a function that is still running at the end counts up to
//! the last read, and is marked partial.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    io::{IsTerminal as _, Write as _},
    path::{Path, PathBuf},
    time::Instant,
};

use cg_common::profiling::{
    FRAME_OUTERMOST, FuncCounters, FuncFrame, FuncKey, FuncStats, FuncThread, SamplerCounters,
};

use super::{Mode, Notice, Notices, processes::ProcessTable};
use crate::{
    attribution::{
        ProcId,
        functions::{CallDelta, FrameId, FunctionInterval, SampleCount, ThreadTime},
    },
    functions::{
        CALLS_PER_S_WARNING, FunctionError, FunctionOptions, StackWalking,
        elf::FirstInstruction,
        maps::ProcMaps,
        python::{self, Detection, PyFunction},
        resolve::{self, LookupScope, Resolution, ResolvedFunction},
        returns::{self, EntryOnly},
        spec::FuncSpec,
        symbolize::{Frame, FrameKind, ProcessUids, Symbolizer, file_name, is_stack_root},
        unwind::{CfiFiles, ProcessUnwinder, StackCopy, UNWINDERS_KEPT},
    },
    probes::{
        Lifecycle, ProbeError, Probes,
        activity::Activity,
        sampler::{Sample, SampleBatch, Walk},
        uprobes::{AttachPath, Attached},
    },
};

/// Stored function-data entries past which adjacent intervals are merged in pairs.
const ENTRY_BUDGET: usize = 2_000_000;

/// Naming the stacks after a run says what it is doing (and how to cut it short) once it
/// has taken this long.
const NAMING_TOLD_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A probed function, as the report describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbedFunction {
    pub name: String,
    pub module: PathBuf,
    pub offset: u64,
    pub first_instruction: FirstInstruction,
    /// Why it had an entry probe only (calls counted, no time); `None`: entry and return.
    pub entry_only: Option<EntryOnly>,
    pub spec: String,
    /// Highest calls per second seen in one interval, over all processes.
    pub max_calls_per_s: f64,
}

/// A CPython process the sampler met.
#[derive(Clone, Debug, PartialEq)]
pub struct PythonSeen {
    pub pid: u32,
    pub version: String,
    /// Whether its Python frames were walked.
    pub frames: bool,
}

/// What the sampler did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SamplerSummary {
    pub sample_hz: u64,
    /// Samples of targets taken (measured).
    pub samples: u64,
    /// Samples lost whole (the sample ring was full: the agent read it late).
    pub lost_samples: u64,
    /// Samples whose kernel / user stack the kernel could not walk: measured.
    pub lost_kernel_stacks: u64,
    pub lost_user_stacks: u64,
    /// The sampling program's mean kernel run time per run, and its runs, when the
    /// kernel's BPF statistics were on (measured).
    pub run_ns_per_run: Option<f64>,
    pub runs: Option<u64>,
    pub python: Vec<PythonSeen>,
    /// Share of native-only samples whose user stack did not reach the program's entry
    /// point, or a thread's (truncated), in percent.
    pub incomplete_stacks_pct: Option<f64>,
    /// `--stacks`, and how the native-only samples' stacks were walked.
    pub stacks: StackWalking,
    pub walks: WalkCounts,
    /// Time spent naming the stacks at the end.
    pub symbolize_ms: f64,
    /// Distinct stacks named.
    pub stacks_count: usize,
    /// Remarks of the naming (JIT maps, debug files, MiniDebugInfo refused).
    pub notes: Vec<String>,
}

/// Native-only samples by how their user stack was walked, and how many of them did not
/// reach the program's entry point (truncated). Measured counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkCounts {
    pub frame_pointer: u64,
    pub frame_pointer_truncated: u64,
    pub dwarf: u64,
    pub dwarf_truncated: u64,
}

impl WalkCounts {
    /// Counts `samples` walked by `walk`, `truncated` or not.
    fn add(&mut self, walk: Walk, truncated: bool, samples: u64) {
        let (all, cut) = match walk {
            Walk::FramePointer => (&mut self.frame_pointer, &mut self.frame_pointer_truncated),
            Walk::Dwarf => (&mut self.dwarf, &mut self.dwarf_truncated),
        };
        *all += samples;
        if truncated {
            *cut += samples;
        }
    }

    /// Percent of the samples whose stack was truncated; `None` without samples.
    pub fn truncated_pct(&self) -> Option<f64> {
        let all = self.frame_pointer + self.dwarf;
        let cut = self.frame_pointer_truncated + self.dwarf_truncated;
        (all > 0).then(|| 100.0 * cut as f64 / all as f64)
    }
}

/// Everything function-level a run recorded: the input of the report's function figures.
#[derive(Clone, Debug, Default)]
pub struct FunctionRecording {
    pub intervals: Vec<FunctionInterval>,
    /// Named frames; `stacks` refer to them by index.
    pub frames: Vec<Frame>,
    /// Stacks, outermost frame first; samples refer to them by index.
    pub stacks: Vec<Vec<FrameId>>,
    /// Probed functions by id.
    pub probed: Vec<ProbedFunction>,
    /// (process, function) pairs still running at the end.
    pub partial: BTreeSet<(ProcId, u32)>,
    pub uprobe_counters: Option<FuncCounters>,
    /// How the function probes were attached.
    pub attach_path: Option<AttachPath>,
    pub sampler: Option<SamplerSummary>,
    /// How many times stored intervals were merged in pairs.
    pub merges: u32,
    /// `--top-functions`.
    pub top: usize,
    /// Libraries probed during the run, and SPECs that waited for one in vain.
    pub notes: Vec<String>,
}

/// The SPECs resolved for a mode (before anything is loaded, so bad input exits early).
pub fn resolve_specs(
    options: &FunctionOptions,
    mode: &Mode,
    proc_root: &Path,
    notices: &Notices,
) -> Result<Resolution, FunctionError> {
    if options.specs.is_empty() {
        return Ok(Resolution::default());
    }
    let scope = lookup_scope(mode, proc_root);
    if let (Mode::Wrap { command }, Some(exe)) = (mode, &scope.executable)
        && std::fs::read(exe)
            .map(|b| b.get(..2) == Some(b"#!"))
            .unwrap_or(false)
        && options.specs.iter().any(|s| s.object.is_none())
    {
        return Err(FunctionError::Usage(format!(
            "--func: {} is a script ({}), not a binary with symbols; name the binary, e.g. \
             --func /path/to/binary:{}",
            command[0],
            exe.display(),
            options.specs[0].pattern
        )));
    }
    let resolution = resolve::resolve(&options.specs, &scope, options.func_limit)?;
    for note in &resolution.notes {
        notices.tell(Notice::Functions(note.clone()));
    }
    warn_about_exceptions(&resolution.functions, notices);
    Ok(resolution)
}

/// Where a mode's SPECs look for their files: the traced program (the command found on
/// `PATH`, or the first pid's executable), the pids, and whether a library found nowhere yet
/// may wait for a traced process to load it.
fn lookup_scope(mode: &Mode, proc_root: &Path) -> LookupScope {
    match mode {
        Mode::Wrap { command } => LookupScope {
            executable: command.first().and_then(|c| resolve::which(c)),
            pids: Vec::new(),
            proc_root: proc_root.to_path_buf(),
            defer_unloaded: true,
        },
        Mode::Attach { pids } => LookupScope {
            executable: pids
                .first()
                .and_then(|p| std::fs::read_link(proc_root.join(p.to_string()).join("exe")).ok()),
            pids: pids.clone(),
            proc_root: proc_root.to_path_buf(),
            defer_unloaded: true,
        },
        // The whole machine: a library nobody loads yet must be named by its path.
        Mode::System => LookupScope {
            executable: None,
            pids: Vec::new(),
            proc_root: proc_root.to_path_buf(),
            defer_unloaded: false,
        },
    }
}

/// Says on stderr which probed files unwind their stacks (C++ exceptions, Rust panics): an
/// unwind through a probed function still running terminates the program (see
/// [`crate::functions::returns`]).
fn warn_about_exceptions(functions: &[ResolvedFunction], notices: &Notices) {
    let mut modules: Vec<&Path> = functions
        .iter()
        .filter(|f| f.entry_only.is_none())
        .map(|f| f.module.as_path())
        .collect();
    modules.sort();
    modules.dedup();
    for module in modules {
        if let Ok(elf) = crate::functions::elf::ElfInfo::open(module)
            && returns::unwinds(&elf)
        {
            notices.tell(Notice::Functions(format!(
                "warning: {} unwinds its stack for C++ exceptions or Rust panics: an \
                 exception or a panic that passes through a probed function still running \
                 terminates the program (a return probe replaces the return address that the \
                 unwinder follows); probe functions that exceptions and panics do not cross",
                module.display()
            )));
        }
    }
}

/// A sampled stack before naming: the process (and which program image: a new exec is a
/// new generation) and the kernel's ids of its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct RawStack {
    pid: u32,
    generation: u32,
    kernel: i32,
    user: i32,
    walk: Walk,
    python: u64,
}

#[derive(Clone, Debug)]
struct PythonState {
    detection: Detection,
    attempts: u32,
    /// The interval read of the last attempt (one attempt a read: a read holds many samples
    /// of a process, all of the same moment).
    read: u64,
}

/// The probes' cumulative counters at some moment.
#[derive(Clone, Copy, Debug, Default)]
struct CountedBefore {
    sampler: cg_common::profiling::SamplerCounters,
    sampler_runs: Option<(std::time::Duration, u64)>,
    uprobes: Option<cg_common::profiling::FuncCounters>,
}

impl CountedBefore {
    fn now(probes: &Probes) -> Self {
        CountedBefore {
            sampler: probes.sampler_counters().unwrap_or_default(),
            sampler_runs: probes.sampler_run_time(),
            uprobes: probes.function_counters().ok(),
        }
    }
}

/// `--func` SPECs waiting for a traced process to map a matching library.
#[derive(Clone, Debug, Default)]
struct PendingSpecs {
    specs: Vec<FuncSpec>,
    /// Per SPEC: whether some mapped file matched it.
    matched: Vec<bool>,
    /// Mapped files looked at already.
    seen: HashSet<PathBuf>,
    /// (file, address) of every function probed.
    probed: BTreeSet<(PathBuf, u64)>,
    /// What was attached during the run, or refused (for the report).
    notes: Vec<String>,
    /// Where the next look at the targets' maps starts (they are looked at in turns).
    next: usize,
}

impl PendingSpecs {
    /// What to say of each SPEC whose library no traced process mapped.
    fn unmatched_notes(&self) -> Vec<String> {
        self.specs
            .iter()
            .zip(&self.matched)
            .filter(|(_, matched)| !**matched)
            .map(|(spec, _)| {
                format!(
                    "--func {:?}: no traced process mapped a library named {:?}: nothing was \
                     probed for it (name the file by its path to probe it from the start)",
                    spec.text,
                    spec.object.as_deref().unwrap_or_default()
                )
            })
            .collect()
    }
}

/// Functions found for pending SPECs in one look at the targets' maps, and the files they
/// are in (each with a pid that maps it).
#[derive(Debug, Default)]
struct Found {
    functions: Vec<ResolvedFunction>,
    files: Vec<(PathBuf, u32)>,
}

impl Found {
    /// The files, for a message.
    fn file_list(&self) -> String {
        self.files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Processes whose maps are looked at per interval for pending SPECs: a read of
/// `/proc/PID/maps` costs 0.05-0.15 ms, so at most about 1 % of a core at 100 ms intervals
/// (with more live targets, each is looked at every few intervals).
const PENDING_SCANS_PER_INTERVAL: usize = 8;

/// Function-level state of a running session.
pub struct FunctionSession {
    /// Where remarks go (see [`Notice`]).
    notices: Notices,
    /// The kernel's cumulative counters when this run started (a later run of a set starts
    /// from the previous one's end): the recording gives this run's share.
    counted_before: CountedBefore,
    /// The sampler's counters as of the last read of its ring: the run's figures. (Read when
    /// the report is built, they would also count the samples taken after the run's last
    /// read, while symbols are read, as lost: 7,878 "lost" against 627 read in a 3 s
    /// `--all --profile` run of a debug build.)
    sampler_at_last_read: Option<SamplerCounters>,
    /// Interval reads of the samples so far.
    intervals_read: u64,
    /// Samples read from the ring since the interval began (the ring is read between
    /// intervals where it would fill before the next: see `Probes::sample_ring_read_period`).
    read_early: SampleBatch,
    options: FunctionOptions,
    functions: Vec<ResolvedFunction>,
    pending: PendingSpecs,
    attach_path: Option<AttachPath>,
    proc_root: PathBuf,
    // Probed functions.
    previous: HashMap<FuncKey, FuncStats>,
    completed: HashMap<(ProcId, u32), (u64, u64)>,
    high_water: HashMap<(ProcId, u32), (u64, u64)>,
    /// The functions threads were inside at the last read (calls in progress).
    active: BTreeSet<(ProcId, u32)>,
    /// The functions threads were inside when they exited: partial for good, even once the
    /// thread's entry stack is forgotten (an interval after its exit) and the run reads on.
    ended_inside: BTreeSet<(ProcId, u32)>,
    exited: Vec<(u32, u32)>,
    exited_pending: Vec<(u32, u32)>,
    max_rate: Vec<f64>,
    warned: BTreeSet<u32>,
    // Sampling.
    raw: Vec<RawStack>,
    raw_index: HashMap<RawStack, u32>,
    stack_cache: HashMap<i32, Vec<u64>>,
    python_stacks: HashMap<u64, Vec<u64>>,
    /// Python stacks read from the kernel but not yet learnt (by key: code objects).
    python_read: HashMap<u64, Vec<u64>>,
    /// Code objects read, by (pid, generation, key): the key is the code object's address,
    /// with in its top 16 bits (above any user address) how many times the address was
    /// found to hold another function since ([`Self::code_key`]).
    python_codes: HashMap<(u32, u32, u64), PyFunction>,
    /// The newest key of each code object address, by (pid, generation, address).
    python_code_keys: HashMap<(u32, u32, u64), u64>,
    generation: HashMap<u32, u32>,
    maps: HashMap<(u32, u32), ProcMaps>,
    /// Unwind information of the files met, and each process image's unwinder (built from
    /// its map kept; dropped when the map grows).
    cfi: CfiFiles,
    unwinders: HashMap<(u32, u32), ProcessUnwinder>,
    /// Process images whose map unwinding read again in this interval (once at most each:
    /// a read costs 0.05-0.15 ms, and stacks that end in garbage would ask at every sample).
    maps_reread: HashSet<(u32, u32)>,
    /// Whose JIT map (`/tmp/perf-PID.map`) of each process is believed, read with its maps.
    uids: HashMap<u32, ProcessUids>,
    python: HashMap<(u32, u32), PythonState>,
    interpreters: python::InterpreterCache,
    gone_python: Vec<u32>,
    // Recording.
    intervals: Vec<FunctionInterval>,
    stored: usize,
    merges: u32,
    /// Naming as the run goes, for the live view.
    live: Option<LiveNaming>,
}

/// What the live view needs to show functions while the run goes on: each new stack is
/// named when first sampled (the symbolizer caches per file and function, so this costs
/// little once warm), and the last interval's data is kept.
#[derive(Default)]
struct LiveNaming {
    symbolizer: Symbolizer,
    /// Named stacks, by raw stack index: frame ids, outermost first.
    stacks: Vec<Vec<FrameId>>,
    last: Option<FunctionInterval>,
}

/// One interval's function data and what names it, for the live view.
#[derive(Debug)]
pub struct LiveFunctions<'a> {
    /// The last interval's data (its `start_ns` counts from the run's start).
    pub interval: &'a FunctionInterval,
    /// Stacks by the ids that `interval.samples` use: frame ids, outermost first.
    pub stacks: &'a [Vec<FrameId>],
    /// Frames by id.
    pub frames: &'a [Frame],
    /// Probed functions, by function id.
    pub probed: &'a [ResolvedFunction],
}

impl FunctionSession {
    /// Attaches the function probes and the sampler as the options ask.
    /// `stop()` says whether a stop signal came (its number): attaching then stops.
    pub fn start(
        options: &FunctionOptions,
        resolution: Resolution,
        probes: &mut Probes,
        proc_root: &Path,
        notices: &Notices,
        stop: &mut dyn FnMut() -> Option<i32>,
    ) -> Result<Self, ProbeError> {
        let functions = resolution.functions;
        let attach_path = if functions.is_empty() {
            None
        } else {
            raise_open_files_limit(functions.len() * 2 + 256);
            Some(attach_functions(probes, &functions, stop)?)
        };
        let pending = PendingSpecs {
            matched: vec![false; resolution.pending.len()],
            specs: resolution.pending,
            probed: functions
                .iter()
                .map(|f| (f.module.clone(), f.address))
                .collect(),
            ..PendingSpecs::default()
        };
        if options.profile {
            probes.attach_sampler(options.sample_hz, stop)?;
        }
        Ok(FunctionSession::fresh(
            options.clone(),
            functions,
            pending,
            attach_path,
            proc_root.to_path_buf(),
            notices.clone(),
        ))
    }

    /// A session with probes attached as said and no data yet.
    fn fresh(
        options: FunctionOptions,
        functions: Vec<ResolvedFunction>,
        pending: PendingSpecs,
        attach_path: Option<AttachPath>,
        proc_root: PathBuf,
        notices: Notices,
    ) -> Self {
        let cfi = CfiFiles::with_debug_dirs(options.debug_dirs.clone());
        FunctionSession {
            notices,
            counted_before: CountedBefore::default(),
            sampler_at_last_read: None,
            intervals_read: 0,
            read_early: SampleBatch::default(),
            options,
            attach_path,
            max_rate: vec![0.0; functions.len()],
            functions,
            pending,
            proc_root,
            previous: HashMap::new(),
            completed: HashMap::new(),
            high_water: HashMap::new(),
            active: BTreeSet::new(),
            ended_inside: BTreeSet::new(),
            exited: Vec::new(),
            exited_pending: Vec::new(),
            warned: BTreeSet::new(),
            raw: Vec::new(),
            raw_index: HashMap::new(),
            stack_cache: HashMap::new(),
            python_stacks: HashMap::new(),
            python_read: HashMap::new(),
            python_codes: HashMap::new(),
            python_code_keys: HashMap::new(),
            generation: HashMap::new(),
            maps: HashMap::new(),
            cfi,
            unwinders: HashMap::new(),
            maps_reread: HashSet::new(),
            uids: HashMap::new(),
            python: HashMap::new(),
            interpreters: python::InterpreterCache::default(),
            gone_python: Vec::new(),
            intervals: Vec::new(),
            stored: 0,
            merges: 0,
            live: None,
        }
    }

    /// Hands over what this run recorded, as a session of its own to [`Self::finish`], and
    /// goes on for the next run of a set (`--repeat`) with the same probes and SPECs and no
    /// data: the processes of the next run are new, and so are their ids. The samples taken
    /// from now on wait in the sample ring for the next read (if there is one).
    pub fn next_run(&mut self, probes: &Probes) -> FunctionSession {
        probes.hold_samples();
        let pending = PendingSpecs {
            notes: Vec::new(),
            ..self.pending.clone()
        };
        let mut fresh = FunctionSession::fresh(
            self.options.clone(),
            self.functions.clone(),
            pending,
            self.attach_path,
            self.proc_root.clone(),
            self.notices.clone(),
        );
        fresh.counted_before = CountedBefore::now(probes);
        std::mem::replace(self, fresh)
    }

    /// Names stacks as they are first sampled and keeps each interval's data, so that
    /// [`FunctionSession::live`] can show functions while the run goes on.
    pub fn name_as_we_go(&mut self) {
        self.live = Some(LiveNaming {
            symbolizer: Symbolizer::with_debug_dirs(self.options.debug_dirs.clone())
                .with_lines(self.options.lines),
            ..LiveNaming::default()
        });
    }

    /// The last interval's function data, named (after [`FunctionSession::name_as_we_go`]).
    pub fn live(&self) -> Option<LiveFunctions<'_>> {
        let live = self.live.as_ref()?;
        Some(LiveFunctions {
            interval: live.last.as_ref()?,
            stacks: &live.stacks,
            frames: live.symbolizer.frames(),
            probed: &self.functions,
        })
    }

    /// One interval: lifecycle events, probed functions, samples. `record` is false before
    /// the run starts (the data is read and dropped).
    pub fn sample(
        &mut self,
        probes: &mut Probes,
        activity: &Activity,
        table: &mut ProcessTable,
        run_start_ns: u64,
        record: bool,
        events: &[Lifecycle],
    ) {
        self.note_lifecycle(probes, events);
        if !self.pending.specs.is_empty() {
            let now_ns = activity.start_ns + activity.duration_ns;
            self.attach_pending(probes, table, now_ns.saturating_sub(run_start_ns));
        }
        let duration_s = activity.duration_ns as f64 / 1e9;
        let calls = if self.functions.is_empty() {
            Vec::new()
        } else {
            self.read_calls(probes, table, activity.start_ns, duration_s)
        };
        let samples = if self.options.profile {
            self.read_samples(probes, table, activity.start_ns)
        } else {
            Vec::new()
        };
        if let Some(live) = self.live.as_mut() {
            live.last = None;
        }
        if !record {
            return;
        }
        let interval = FunctionInterval {
            start_ns: activity.start_ns.saturating_sub(run_start_ns),
            duration_ns: activity.duration_ns,
            threads: thread_times(activity, table, &calls, &samples),
            samples,
            calls,
        };
        self.name_for_live(&interval);
        self.store(interval);
    }

    /// Follows execs (a new program image: a new generation of the pid, its Python frames
    /// forgotten) and exits (threads to forget once read for the last time).
    fn note_lifecycle(&mut self, probes: &mut Probes, events: &[Lifecycle]) {
        for pid in self.gone_python.drain(..) {
            probes.forget_python(pid);
        }
        for event in events {
            match event {
                Lifecycle::Exec { pid, .. } => {
                    *self.generation.entry(*pid).or_default() += 1;
                    probes.forget_python(*pid);
                }
                Lifecycle::Exit {
                    pid,
                    tid,
                    process_exited,
                    ..
                } => {
                    self.exited.push((*pid, *tid));
                    if *process_exited {
                        self.gone_python.push(*pid);
                    }
                }
                Lifecycle::Fork { .. } => {}
            }
        }
    }

    /// Names the stacks first sampled in this interval and keeps the interval, for the live
    /// view (after [`Self::name_as_we_go`]).
    fn name_for_live(&mut self, interval: &FunctionInterval) {
        if let Some(mut live) = self.live.take() {
            for raw in &self.raw[live.stacks.len()..] {
                let (ids, _) = self.name_stack(&mut live.symbolizer, raw);
                live.stacks.push(ids);
            }
            live.last = Some(interval.clone());
            self.live = Some(live);
        }
    }

    /// Keeps an interval; past [`ENTRY_BUDGET`] stored entries, the intervals kept are
    /// merged in pairs.
    fn store(&mut self, interval: FunctionInterval) {
        self.stored += interval.len() + 1;
        self.intervals.push(interval);
        if self.stored > ENTRY_BUDGET && self.intervals.len() >= 2 {
            self.intervals = merged_in_pairs(std::mem::take(&mut self.intervals));
            self.stored = self.intervals.iter().map(|i| i.len() + 1).sum();
            self.merges += 1;
        }
    }

    /// Probes the functions of pending SPECs in the files the live targets mapped since the
    /// last look (`since_start_ns`: when, for the notes).
    fn attach_pending(&mut self, probes: &mut Probes, table: &ProcessTable, since_start_ns: u64) {
        let mut pids: Vec<u32> = table
            .records()
            .iter()
            .filter(|r| r.ended_ns.is_none())
            .map(|r| r.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        let (turn, next) = turn_of(&pids, self.pending.next, PENDING_SCANS_PER_INTERVAL);
        self.pending.next = next;
        let mut found = Found::default();
        for pid in turn {
            let Ok(maps) = ProcMaps::read(&self.proc_root, pid) else {
                continue;
            };
            for file in maps.files() {
                if self.pending.seen.insert(file.as_ref().clone()) {
                    self.match_pending(pid, &file, &mut found);
                }
            }
        }
        if !found.functions.is_empty() {
            self.probe_found(probes, found, since_start_ns);
        }
    }

    /// Resolves the pending SPECs whose library `file` (mapped by `pid`, newly seen) is,
    /// into `found`; a SPEC that matches it is matched for good, and what fails is noted.
    fn match_pending(&mut self, pid: u32, file: &Path, found: &mut Found) {
        let name = file_name(file);
        for (i, spec) in self.pending.specs.iter().enumerate() {
            let Some(object) = spec.object.as_deref() else {
                continue;
            };
            if !resolve::object_matches(object, &name) {
                continue;
            }
            self.pending.matched[i] = true;
            // The path as the process sees it, from this mount namespace if need be.
            let path = if file.is_file() {
                file.to_path_buf()
            } else {
                self.proc_root
                    .join(pid.to_string())
                    .join("root")
                    .join(file.strip_prefix("/").unwrap_or(file))
            };
            let first_id = (self.functions.len() + found.functions.len()) as u32;
            match resolve::resolve_in_file(spec, &path, first_id, &mut self.pending.probed) {
                Ok(more) if !more.is_empty() => {
                    found.files.push((path.clone(), pid));
                    found.functions.extend(more);
                }
                Ok(_) => self.pending.notes.push(format!(
                    "--func {:?}: {} (mapped by pid {pid}) has no function matching {:?}",
                    spec.text,
                    path.display(),
                    spec.pattern
                )),
                Err(err) => self
                    .pending
                    .notes
                    .push(format!("--func {:?}: {err}", spec.text)),
            }
        }
    }

    /// Probes the functions found for pending SPECs (`since_start_ns` into the run), unless
    /// they would take the run over `--func-limit`; notes what was done or refused.
    fn probe_found(&mut self, probes: &mut Probes, found: Found, since_start_ns: u64) {
        let total = self.functions.len() + found.functions.len();
        if total > self.options.func_limit {
            self.pending.notes.push(format!(
                "{} function(s) of {} were not probed: with them {total} functions would be \
                 probed, over --func-limit {}",
                found.functions.len(),
                found.file_list(),
                self.options.func_limit
            ));
            return;
        }
        raise_open_files_limit(total * 2 + 256);
        match probes.attach_functions(&found.functions, &mut |_, _| true) {
            Ok(Attached::All(path)) => {
                self.attach_path.get_or_insert(path);
                for (file, pid) in &found.files {
                    let count = found.functions.iter().filter(|f| &f.module == file).count();
                    let text = format!(
                        "{count} function(s) of {} probed from {:.2} s into the run, when \
                         pid {pid} had mapped it (library loaded after the start): their calls \
                         before that are not counted",
                        file.display(),
                        since_start_ns as f64 / 1e9
                    );
                    tracing::info!("{text}");
                    self.pending.notes.push(text);
                }
                self.max_rate.resize(total, 0.0);
                self.functions.extend(found.functions);
            }
            Ok(Attached::Stopped { .. }) => {}
            Err(err) => {
                let text = format!(
                    "the functions of {} could not be probed: {err}",
                    found.file_list()
                );
                self.notices
                    .tell(Notice::Functions(format!("warning: {text}")));
                self.pending.notes.push(text);
            }
        }
    }

    /// What the probed functions did in the interval that ends now (`now_ns`, lasting
    /// `duration_s`): calls completed and on-CPU time, the calls still running included.
    fn read_calls(
        &mut self,
        probes: &mut Probes,
        table: &mut ProcessTable,
        now_ns: u64,
        duration_s: f64,
    ) -> Vec<CallDelta> {
        // Completed calls first, then the calls in progress: a call that completes between
        // the two reads is then briefly missing (caught up next time), never counted twice.
        let stats = match probes.function_stats() {
            Ok(stats) => stats,
            Err(err) => {
                tracing::warn!("reading function totals: {err}");
                return Vec::new();
            }
        };
        let threads = probes.function_threads().unwrap_or_default();
        let calls = self.add_completed(stats, table, now_ns);
        let running = self.running_calls(threads, table, now_ns);
        let out = call_deltas(&self.completed, &running, &calls, &mut self.high_water);
        self.note_rates(&calls, duration_s);
        self.forget_exited(probes);
        out
    }

    /// Adds the growth of the kernel's totals of completed calls to each (process,
    /// function)'s; returns the calls completed since the last read.
    fn add_completed(
        &mut self,
        stats: Vec<(FuncKey, FuncStats)>,
        table: &mut ProcessTable,
        now_ns: u64,
    ) -> BTreeMap<(ProcId, u32), u64> {
        let mut calls: BTreeMap<(ProcId, u32), u64> = BTreeMap::new();
        for (key, now) in stats {
            let before = self.previous.insert(key, now).unwrap_or_default();
            let process = table.id_of(key.tgid, now_ns);
            let done = self.completed.entry((process, key.func)).or_default();
            done.0 += now.incl_ns.saturating_sub(before.incl_ns);
            done.1 += now.self_ns.saturating_sub(before.self_ns);
            let n = now.calls.saturating_sub(before.calls);
            if n > 0 {
                *calls.entry((process, key.func)).or_default() += n;
            }
        }
        calls
    }

    /// The calls in progress: (inclusive, self) on-CPU ns so far per (process, function),
    /// from the threads' entry stacks and CPU clocks. Notes which functions threads are
    /// inside (partial), and for good those of threads that exited inside them.
    fn running_calls(
        &mut self,
        threads: Vec<(u32, FuncThread)>,
        table: &mut ProcessTable,
        now_ns: u64,
    ) -> HashMap<(ProcId, u32), (u64, u64)> {
        let mut running: HashMap<(ProcId, u32), (u64, u64)> = HashMap::new();
        self.active.clear();
        for (tid, thread) in threads {
            let process = table.id_of(thread.tgid, now_ns);
            let depth = (thread.depth as usize).min(thread.frames.len());
            let frames = &thread.frames[..depth];
            let inside = frames.iter().map(|f| (process, f.func));
            // Read for the last time before it is forgotten (below): it exited inside these.
            if self.exited_pending.iter().any(|&(_, t)| t == tid) {
                self.ended_inside.extend(inside.clone());
            }
            self.active.extend(inside);
            // A thread that is gone keeps what the last read saw.
            let Some(clock_ns) = thread_cpu_ns(&self.proc_root, thread.tgid, tid) else {
                continue;
            };
            for (func, incl, own) in running_times(frames, clock_ns) {
                let r = running.entry((process, func)).or_default();
                r.0 += incl;
                r.1 += own;
            }
        }
        running
    }

    /// Keeps each function's highest rate of calls, and warns (once per function) of one
    /// called so often that its probes distort what they measure.
    fn note_rates(&mut self, calls: &BTreeMap<(ProcId, u32), u64>, duration_s: f64) {
        if duration_s <= 0.05 {
            return;
        }
        let mut per_function: BTreeMap<u32, u64> = BTreeMap::new();
        for ((_, func), n) in calls {
            *per_function.entry(*func).or_default() += n;
        }
        for (func, n) in per_function {
            let rate = n as f64 / duration_s;
            if let Some(max) = self.max_rate.get_mut(func as usize) {
                *max = max.max(rate);
            }
            if rate > CALLS_PER_S_WARNING
                && self.warned.insert(func)
                && let Some(f) = self.functions.get(func as usize)
            {
                self.notices.tell(Notice::Functions(format!(
                    "warning: {} is called {:.0} times/s (measured); its probes cost about \
                     {:.0} µs per call (estimated, {} first instruction), which inflates its \
                     time and the program's: probe less frequent functions",
                    f.name,
                    rate,
                    f.first_instruction.estimated_pair_cost_us(),
                    f.first_instruction.describe()
                )));
            }
        }
    }

    /// Forgets the threads that exited an interval ago (their last totals are read now), in
    /// the kernel too; those that exited since wait for the next read.
    fn forget_exited(&mut self, probes: &mut Probes) {
        for (tgid, tid) in std::mem::take(&mut self.exited_pending) {
            let keys: Vec<FuncKey> = self
                .previous
                .keys()
                .filter(|k| k.tgid == tgid && k.tid == tid)
                .copied()
                .collect();
            for key in &keys {
                self.previous.remove(key);
            }
            probes.forget_function_thread(tid, &keys);
        }
        self.exited_pending = std::mem::take(&mut self.exited);
    }

    /// Reads the samples between two intervals where the ring would fill within one, so that
    /// few copies of its records wait: the samples join the interval's own read.
    pub fn read_sample_ring(&mut self, probes: &mut Probes) {
        if let Some(batch) = self.take_samples(probes) {
            self.read_early.merge(batch);
        }
    }

    /// What the sample ring holds, unwound; `None` (logged) when it cannot be read.
    fn take_samples(&mut self, probes: &mut Probes) -> Option<SampleBatch> {
        let batch = match probes.take_samples(&mut |pid, copy| self.unwind(pid, copy)) {
            Ok(batch) => batch,
            Err(err) => {
                tracing::warn!("reading samples: {err}");
                return None;
            }
        };
        self.sampler_at_last_read = probes.sampler_counters().ok();
        Some(batch)
    }

    fn read_samples(
        &mut self,
        probes: &mut Probes,
        table: &mut ProcessTable,
        now_ns: u64,
    ) -> Vec<SampleCount> {
        self.intervals_read += 1;
        let mut batch = std::mem::take(&mut self.read_early);
        if let Some(last) = self.take_samples(probes) {
            batch.merge(last);
        }
        // Maps are read again for unwinding once an interval at most (reads between
        // intervals included).
        self.maps_reread.clear();
        self.stack_cache.extend(batch.stacks);
        self.python_read.extend(batch.python);
        let mut out = Vec::with_capacity(batch.samples.len());
        for (key, count) in batch.samples {
            let pid = key.tgid;
            let generation = self.generation.get(&pid).copied().unwrap_or(0);
            self.ensure_python(probes, pid, generation);
            let raw = RawStack {
                pid,
                generation,
                kernel: key.kernel_stack,
                user: key.user_stack,
                walk: key.walk,
                python: key.py_stack,
            };
            let stack = match self.raw_index.get(&raw) {
                Some(&index) => index,
                None => {
                    self.learn(&key, generation);
                    let index = self.raw.len() as u32;
                    self.raw.push(raw);
                    self.raw_index.insert(raw, index);
                    index
                }
            };
            out.push(SampleCount {
                process: table.id_of(pid, now_ns),
                tid: key.tid,
                stack,
                count,
            });
        }
        out
    }

    /// The user stack of a sample whose stack was copied, unwound by the files' call frame
    /// information: `None` keeps the frame-pointer walk (`--stacks fp`; under `auto`, a
    /// sample that hit a file without `.eh_frame`). The process's map is read again when the
    /// sampled address, or the last address the walk reached, lies outside the map kept (a
    /// new process, a library loaded since; once an interval at most), and the walk done
    /// again.
    fn unwind(&mut self, pid: u32, copy: &StackCopy<'_>) -> Option<Vec<u64>> {
        if self.options.stacks == StackWalking::Fp {
            return None;
        }
        let generation = self.generation.get(&pid).copied().unwrap_or(0);
        let key = (pid, generation);
        let known = |maps: &HashMap<(u32, u32), ProcMaps>, address: u64| {
            maps.get(&key).is_some_and(|m| m.find(address).is_some())
        };
        if !known(&self.maps, copy.ip) {
            self.reread_maps(key);
        }
        let mut addresses = self.unwind_with_kept_map(key, copy)?;
        if let Some(&last) = addresses.last()
            && !known(&self.maps, last.saturating_sub(1))
            && self.reread_maps(key)
        {
            addresses = self.unwind_with_kept_map(key, copy)?;
        }
        (!addresses.is_empty()).then_some(addresses)
    }

    /// Reads a process image's map again for unwinding, once an interval at most; when it
    /// changed, its unwinder is rebuilt at the next walk. Returns whether it changed.
    fn reread_maps(&mut self, key: (u32, u32)) -> bool {
        if !self.maps_reread.insert(key) || !self.refresh_maps(key.0, key.1) {
            return false;
        }
        self.unwinders.remove(&key);
        true
    }

    fn unwind_with_kept_map(&mut self, key: (u32, u32), copy: &StackCopy<'_>) -> Option<Vec<u64>> {
        let maps = self.maps.get(&key)?;
        if self.unwinders.len() >= UNWINDERS_KEPT && !self.unwinders.contains_key(&key) {
            self.unwinders.clear();
        }
        let cfi = &mut self.cfi;
        let unwinder = self
            .unwinders
            .entry(key)
            .or_insert_with(|| ProcessUnwinder::new(maps, cfi));
        if self.options.stacks == StackWalking::Auto && !unwinder.has_cfi(copy.ip) {
            return None;
        }
        Some(unwinder.unwind(copy))
    }

    /// Reads what naming a new stack will need while the process still exists: its
    /// addresses, its memory map, its Python code objects.
    fn learn(&mut self, key: &Sample, generation: u32) {
        let pid = key.tgid;
        if key.user_stack >= 0 && self.stack_cache.contains_key(&key.user_stack) {
            let addresses = &self.stack_cache[&key.user_stack];
            let stale = match self.maps.get(&(pid, generation)) {
                None => true,
                Some(maps) => addresses
                    .iter()
                    .any(|&a| maps.find(a).is_none_or(|m| m.path.is_none())),
            };
            if stale {
                self.refresh_maps(pid, generation);
            }
        }
        if key.py_stack != 0 && !self.python_stacks.contains_key(&key.py_stack) {
            let codes = self.python_read.remove(&key.py_stack).unwrap_or_default();
            let walker = match self.python.get(&(pid, generation)) {
                Some(PythonState {
                    detection: Detection::Python(p),
                    ..
                }) => Some(p.walker),
                _ => None,
            };
            // Each code object of a new stack is read again: a code object freed (an
            // `exec`'d string at start-up) leaves its address to another function's.
            let codes: Vec<u64> = codes
                .iter()
                .map(|&code| match (code, walker.as_ref()) {
                    (0, _) | (_, None) => code,
                    (_, Some(walker)) => {
                        let read = python::read_code(&self.proc_root, pid, walker, code);
                        self.code_key(pid, generation, code, read)
                    }
                })
                .collect();
            tracing::debug!(
                "pid {pid}: python stack {:#x}: {} frames, walker {}",
                key.py_stack,
                codes.len(),
                walker.is_some()
            );
            self.python_stacks.insert(key.py_stack, codes);
        }
    }

    /// The key under which a stack keeps code object `code`, just read as `read`: the
    /// address's newest key while it names the same function (or nothing could be read),
    /// else a new key holding `read`, so that the stacks learnt before keep their names.
    fn code_key(&mut self, pid: u32, generation: u32, code: u64, read: Option<PyFunction>) -> u64 {
        let newest = self
            .python_code_keys
            .get(&(pid, generation, code))
            .and_then(|&key| Some((key, self.python_codes.get(&(pid, generation, key))?)));
        let (key, new) = next_code_key(code, newest, read.as_ref());
        if let (true, Some(read)) = (new, read) {
            self.python_codes.insert((pid, generation, key), read);
            self.python_code_keys.insert((pid, generation, code), key);
        }
        key
    }

    /// Reads a process's memory map again (a new stack has an address outside the one kept):
    /// the read completes the map kept for this program image and never replaces it with
    /// less. A process that has exited but is not reaped yet reads as empty, and one that is
    /// reaped not at all: the map kept (read while it ran) then names its samples.
    /// Returns whether the map kept changed.
    fn refresh_maps(&mut self, pid: u32, generation: u32) -> bool {
        let read = match ProcMaps::read(&self.proc_root, pid) {
            Ok(read) => read,
            Err(err) => {
                tracing::debug!("pid {pid}: memory map not read again ({err}); the kept one stays");
                return false;
            }
        };
        if !read.maps_files() {
            tracing::debug!("pid {pid}: its memory map reads empty (exited); the kept one stays");
            return false;
        }
        let changed = match self.maps.entry((pid, generation)) {
            std::collections::hash_map::Entry::Occupied(mut kept) => kept.get_mut().update(read),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(read);
                true
            }
        };
        if let Some(uids) = ProcessUids::read(&self.proc_root, pid) {
            self.uids.insert(pid, uids);
        }
        changed
    }

    /// Looks for CPython in a sampled process, and tells the sampler where its frames are.
    fn ensure_python(&mut self, probes: &mut Probes, pid: u32, generation: u32) {
        let proc_root = self.proc_root.clone();
        let read = self.intervals_read;
        let state = self.python.entry((pid, generation)).or_insert(PythonState {
            detection: Detection::NotPython,
            attempts: 0,
            read,
        });
        // A process is looked at when first sampled; one whose executable looks like
        // Python but whose interpreter is not mapped yet (just exec'd) gets a few more tries,
        // at later reads.
        let retry = state.attempts == 0
            || (state.attempts < 5
                && state.read != read
                && state.detection == Detection::NotPython
                && exe_looks_like_python(&proc_root, pid));
        if !retry {
            return;
        }
        state.attempts += 1;
        state.read = read;
        state.detection = python::detect(&proc_root, pid, &mut self.interpreters);
        tracing::debug!(
            "pid {pid} generation {generation}: python detection {:?}",
            state.detection
        );
        if let Detection::Python(found) = &state.detection
            && let Err(err) = probes.set_python(pid, found.walker)
        {
            tracing::warn!("python frames of pid {pid}: {err}");
        }
    }

    /// Names every stack and hands over the recording. Once `give_way` says so (a stop
    /// signal while naming), no further file's source lines are read: the rest of the
    /// frames are named by function, and a note says so.
    pub fn finish(
        mut self,
        probes: &Probes,
        give_way: impl Fn() -> bool + 'static,
    ) -> FunctionRecording {
        let before = self.counted_before;
        let uprobe_counters = (!self.functions.is_empty())
            .then(|| probes.function_counters().ok())
            .flatten()
            .map(|now| match before.uprobes {
                Some(then) => func_counters_since(now, then),
                None => now,
            });
        let (frames, stacks, naming) = self.name_all_stacks(give_way);
        let sampler = self
            .options
            .profile
            .then(|| self.sampler_summary(probes, naming));
        let mut notes = std::mem::take(&mut self.pending.notes);
        for text in self.pending.unmatched_notes() {
            self.notices
                .tell(Notice::Functions(format!("warning: {text}")));
            notes.push(text);
        }
        FunctionRecording {
            notes,
            probed: self.probed_functions(),
            intervals: self.intervals,
            frames,
            stacks,
            partial: self.active.union(&self.ended_inside).copied().collect(),
            uprobe_counters,
            attach_path: self.attach_path,
            sampler,
            merges: self.merges,
            top: self.options.top,
        }
    }

    /// Names every stack sampled, each distinct named stack once, and renumbers the samples
    /// of the intervals kept to the named stacks: the frames, the stacks, and what the
    /// naming found.
    fn name_all_stacks(
        &mut self,
        give_way: impl Fn() -> bool + 'static,
    ) -> (Vec<Frame>, Vec<Vec<FrameId>>, Naming) {
        let started = Instant::now();
        let mut symbolizer = Symbolizer::with_debug_dirs(self.options.debug_dirs.clone())
            .with_lines(self.options.lines)
            .lines_until(give_way);
        let mut named = StackTable::default();
        let mut remap: Vec<u32> = Vec::with_capacity(self.raw.len());
        let mut native_only: BTreeMap<u32, (bool, Walk)> = BTreeMap::new();
        let mut told = false;
        for (index, raw) in self.raw.iter().enumerate() {
            if !told && self.options.lines && started.elapsed() >= NAMING_TOLD_AFTER {
                told = true;
                self.notices.tell(Notice::Functions(format!(
                    "naming the {} stacks sampled ({index} so far); a stop signal names the \
                     rest by function, without source lines",
                    self.raw.len()
                )));
            }
            let (ids, complete) = self.name_stack(&mut symbolizer, raw);
            if raw.python == 0 && raw.user >= 0 {
                native_only.insert(index as u32, (!complete, raw.walk));
            }
            remap.push(named.id(ids));
        }
        let notes = symbolizer.notes();
        let frames = symbolizer.into_frames();
        let walks = renumber_samples(&mut self.intervals, &remap, &native_only);
        let naming = Naming {
            walks,
            symbolize_ms: started.elapsed().as_secs_f64() * 1e3,
            stacks_count: named.stacks.len(),
            notes,
        };
        (frames, named.stacks, naming)
    }

    /// What the sampler did in this run (its counters since the run started).
    fn sampler_summary(&self, probes: &Probes, naming: Naming) -> SamplerSummary {
        let before = self.counted_before;
        let now = self
            .sampler_at_last_read
            .or_else(|| probes.sampler_counters().ok())
            .unwrap_or_default();
        let counters = sampler_counters_since(now, before.sampler);
        let run_time = runs_since(probes.sampler_run_time(), before.sampler_runs);
        SamplerSummary {
            sample_hz: self.options.sample_hz,
            samples: counters.samples,
            lost_samples: counters.lost_samples,
            lost_kernel_stacks: counters.lost_kernel_stacks,
            lost_user_stacks: counters.lost_user_stacks,
            run_ns_per_run: run_time.map(|(t, n)| t.as_nanos() as f64 / n as f64),
            runs: run_time.map(|(_, n)| n),
            python: python_seen(&self.python),
            incomplete_stacks_pct: naming.walks.truncated_pct(),
            stacks: self.options.stacks,
            walks: naming.walks,
            symbolize_ms: naming.symbolize_ms,
            stacks_count: naming.stacks_count,
            notes: naming.notes,
        }
    }

    /// The probed functions as the report describes them.
    fn probed_functions(&self) -> Vec<ProbedFunction> {
        self.functions
            .iter()
            .zip(&self.max_rate)
            .map(|(f, &max_calls_per_s)| ProbedFunction {
                name: f.name.clone(),
                module: f.module.clone(),
                offset: f.offset,
                first_instruction: f.first_instruction,
                entry_only: f.entry_only,
                spec: f.spec.clone(),
                max_calls_per_s,
            })
            .collect()
    }

    /// A stack's frames, outermost first, and whether its native part reached the
    /// program's entry point (or a thread's).
    fn name_stack(&self, symbolizer: &mut Symbolizer, raw: &RawStack) -> (Vec<FrameId>, bool) {
        let maps = self.maps.get(&(raw.pid, raw.generation));
        if let Some(&uids) = self.uids.get(&raw.pid) {
            symbolizer.set_process_uids(raw.pid, uids);
        }
        let native: Vec<FrameId> = self
            .stack_cache
            .get(&raw.user)
            .filter(|_| raw.user >= 0)
            .map(|addresses| {
                addresses
                    .iter()
                    .enumerate()
                    .flat_map(|(i, &a)| symbolizer.native_frames(raw.pid, maps, a, i > 0))
                    .collect()
            })
            .unwrap_or_default();
        // Complete when the walk got as far as a root (`main`, `__libc_start_main`,
        // `start_thread`...): what lies beyond is start-up code, unnamed in a stripped
        // executable (its `_start`).
        let complete = native
            .iter()
            .any(|&f| is_stack_root(&symbolizer.frame(f).symbol));
        let mut out: Vec<FrameId> = Vec::new();
        let python = self
            .python_stacks
            .get(&raw.python)
            .filter(|_| raw.python != 0);
        match python {
            Some(codes) if codes.iter().any(|&c| c != 0) => {
                for &code in codes.iter().rev().filter(|&&c| c != 0) {
                    let frame = match self.python_codes.get(&(raw.pid, raw.generation, code)) {
                        Some(f) => Frame {
                            line: Some(f.line),
                            ..Frame::named(
                                f.qualname.clone(),
                                f.filename.clone(),
                                FrameKind::Python,
                            )
                        },
                        None => Frame::unknown("[python]"),
                    };
                    out.push(symbolizer.intern(frame));
                }
                // Native frames called from Python code (a C extension, libc), innermost
                // first until the interpreter's own frames, which the Python frames stand for.
                let interpreter = match self.python.get(&(raw.pid, raw.generation)) {
                    Some(PythonState {
                        detection: Detection::Python(p),
                        ..
                    }) => Some(file_name(&p.interpreter)),
                    _ => None,
                };
                let called: Vec<FrameId> = native
                    .iter()
                    .copied()
                    .take_while(|&f| Some(&symbolizer.frame(f).module) != interpreter.as_ref())
                    .collect();
                if called.len() < native.len() {
                    out.extend(called.into_iter().rev());
                } else if let Some(&leaf) = native.first() {
                    // The walk never reached the interpreter (no frame pointers): only the
                    // innermost frame is trustworthy.
                    out.push(leaf);
                }
            }
            _ => out.extend(native.into_iter().rev()),
        }
        if raw.kernel >= 0
            && let Some(addresses) = self.stack_cache.get(&raw.kernel)
        {
            out.extend(addresses.iter().rev().map(|&a| symbolizer.kernel(a)));
        }
        if out.is_empty() {
            out.push(symbolizer.intern(Frame::unknown("[no stack]")));
        }
        (out, complete)
    }
}

/// Attaches the probes to every function: with a progress line on a terminal when it takes
/// a while, and stopping between steps when `stop()` says a stop signal came (then what was
/// attached is detached when `probes` is dropped, and the error says nothing was traced).
fn attach_functions(
    probes: &mut Probes,
    functions: &[ResolvedFunction],
    stop: &mut dyn FnMut() -> Option<i32>,
) -> Result<AttachPath, ProbeError> {
    let mut stopped_by = None;
    let terminal = std::io::stderr().is_terminal() && !crate::console::is_quiet();
    let started = Instant::now();
    let mut shown = false;
    let mut last_shown = started;
    tracing::info!("attaching probes to {} functions", functions.len());
    let attached = probes.attach_functions(functions, &mut |done, total| {
        let now = Instant::now();
        let due = if shown {
            now - last_shown >= PROGRESS_EVERY
        } else {
            now - started >= PROGRESS_AFTER
        };
        if terminal && due {
            shown = true;
            last_shown = now;
            let _ = write!(
                std::io::stderr(),
                "\rcg-trace: attaching probes: {done}/{total} functions"
            );
        }
        stopped_by = stopped_by.or_else(&mut *stop);
        stopped_by.is_none()
    });
    if shown {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    match attached? {
        Attached::All(path) => {
            tracing::info!(
                "attached probes to {} functions in {elapsed_ms:.1} ms ({path:?})",
                functions.len()
            );
            Ok(path)
        }
        Attached::Stopped { functions: done } => {
            let signal = stopped_by.unwrap_or(libc::SIGINT);
            Err(ProbeError::Interrupted {
                signal,
                attached: done,
                total: functions.len(),
            })
        }
    }
}

/// Attaching shows its progress once it has taken this long, then renews it this often.
const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_millis(250);
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// A thread's CPU time now (the kernel's `sum_exec_runtime`, brought up to date on read).
fn thread_cpu_ns(proc_root: &Path, tgid: u32, tid: u32) -> Option<u64> {
    let path = proc_root.join(format!("{tgid}/task/{tid}/schedstat"));
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn exe_looks_like_python(proc_root: &Path, pid: u32) -> bool {
    std::fs::read_link(proc_root.join(pid.to_string()).join("exe"))
        .map(|p| file_name(&p).contains("python"))
        .unwrap_or(false)
}

/// Raises the soft limit of open files to `needed` (at most the hard limit): each uprobe
/// pair holds two perf-event file descriptors, each connection to `serve` one socket.
pub(crate) fn raise_open_files_limit(needed: usize) {
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0
            && (limit.rlim_cur as usize) < needed
        {
            limit.rlim_cur = limit
                .rlim_max
                .min(needed.max(limit.rlim_cur as usize) as u64);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The pids whose maps this interval looks at, in turns of at most `per_turn` (`next`:
/// where the last turn ended), and where the next turn starts.
fn turn_of(pids: &[u32], next: usize, per_turn: usize) -> (Vec<u32>, usize) {
    if pids.is_empty() {
        return (Vec::new(), next);
    }
    let start = next % pids.len();
    let turn: Vec<u32> = pids
        .iter()
        .cycle()
        .skip(start)
        .take(pids.len().min(per_turn))
        .copied()
        .collect();
    let next = start + turn.len();
    (turn, next)
}

/// On-CPU ns per (target process, thread) in `activity`, for the processes that have calls
/// or samples in the interval.
fn thread_times(
    activity: &Activity,
    table: &mut ProcessTable,
    calls: &[CallDelta],
    samples: &[SampleCount],
) -> Vec<ThreadTime> {
    let involved: BTreeSet<ProcId> = calls
        .iter()
        .map(|c| c.process)
        .chain(samples.iter().map(|s| s.process))
        .collect();
    let mut threads: BTreeMap<(ProcId, u32), u64> = BTreeMap::new();
    for slice in &activity.threads {
        if !table.is_target(slice.thread.tgid) {
            continue;
        }
        let process = table.id_of(slice.thread.tgid, activity.start_ns);
        if involved.contains(&process) {
            *threads.entry((process, slice.thread.tid)).or_default() += slice.on_cpu_ns;
        }
    }
    threads
        .into_iter()
        .map(|((process, tid), on_cpu_ns)| ThreadTime {
            process,
            tid,
            on_cpu_ns,
        })
        .collect()
}

/// The intervals, adjacent ones merged in pairs (an odd last one stays as it is).
fn merged_in_pairs(intervals: Vec<FunctionInterval>) -> Vec<FunctionInterval> {
    let mut merged = Vec::with_capacity(intervals.len().div_ceil(2));
    let mut iter = intervals.into_iter();
    while let Some(a) = iter.next() {
        merged.push(match iter.next() {
            Some(b) => a.merge(&b),
            None => a,
        });
    }
    merged
}

/// The calls in progress of one thread whose CPU clock reads `clock_ns`, from its entry
/// stack (outermost first): per frame, (function, inclusive ns, self ns). Inclusive time
/// counts for the outermost call of a function only (a recursion is not counted twice); a
/// frame's self time ends where its callee's began, less its completed callees' time.
fn running_times(frames: &[FuncFrame], clock_ns: u64) -> Vec<(u32, u64, u64)> {
    frames
        .iter()
        .enumerate()
        .map(|(i, frame)| {
            let end = frames.get(i + 1).map_or(clock_ns, |inner| inner.entry_ns);
            let incl = if frame.flags & FRAME_OUTERMOST != 0 {
                clock_ns.saturating_sub(frame.entry_ns)
            } else {
                0
            };
            let own = end
                .saturating_sub(frame.entry_ns)
                .saturating_sub(frame.child_ns);
            (frame.func, incl, own)
        })
        .collect()
}

/// Per (process, function): the calls completed in the interval (`calls`), and the growth
/// of its (inclusive, self) time, completed calls (`completed`, cumulative) and calls in
/// progress (`running`, so far) together, above its high-water mark, which then rises: a
/// function's time never goes back when a call in progress is read short. Pairs with no
/// calls and no growth are left out.
fn call_deltas(
    completed: &HashMap<(ProcId, u32), (u64, u64)>,
    running: &HashMap<(ProcId, u32), (u64, u64)>,
    calls: &BTreeMap<(ProcId, u32), u64>,
    high_water: &mut HashMap<(ProcId, u32), (u64, u64)>,
) -> Vec<CallDelta> {
    let keys: BTreeSet<(ProcId, u32)> = completed.keys().chain(running.keys()).copied().collect();
    let mut out = Vec::new();
    for key in keys {
        let done = completed.get(&key).copied().unwrap_or_default();
        let now = running.get(&key).copied().unwrap_or_default();
        let total = (done.0 + now.0, done.1 + now.1);
        let mark = high_water.entry(key).or_default();
        let delta = (
            total.0.saturating_sub(mark.0),
            total.1.saturating_sub(mark.1),
        );
        *mark = (mark.0.max(total.0), mark.1.max(total.1));
        let n = calls.get(&key).copied().unwrap_or(0);
        if n == 0 && delta == (0, 0) {
            continue;
        }
        out.push(CallDelta {
            process: key.0,
            func: key.1,
            calls: n,
            incl_ns: delta.0,
            self_ns: delta.1,
        });
    }
    out
}

/// Distinct named stacks, each with its id (its index).
#[derive(Debug, Default)]
struct StackTable {
    stacks: Vec<Vec<FrameId>>,
    ids: HashMap<Vec<FrameId>, u32>,
}

impl StackTable {
    /// The id of `stack`, a new one the first time it is seen.
    fn id(&mut self, stack: Vec<FrameId>) -> u32 {
        if let Some(&id) = self.ids.get(&stack) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.ids.insert(stack.clone(), id);
        self.stacks.push(stack);
        id
    }
}

/// What naming the stacks at the end found and cost.
#[derive(Debug)]
struct Naming {
    walks: WalkCounts,
    symbolize_ms: f64,
    stacks_count: usize,
    notes: Vec<String>,
}

/// Renumbers the samples of `intervals` from raw stack indices to named stack ids
/// (`remap`, by raw index; 0 for one past it), and counts the native-only samples by how
/// their stack was walked and whether it was truncated (`native_only`, by raw index).
fn renumber_samples(
    intervals: &mut [FunctionInterval],
    remap: &[u32],
    native_only: &BTreeMap<u32, (bool, Walk)>,
) -> WalkCounts {
    let mut walks = WalkCounts::default();
    for interval in intervals {
        for sample in &mut interval.samples {
            if let Some(&(truncated, walk)) = native_only.get(&sample.stack) {
                walks.add(walk, truncated, sample.count);
            }
            sample.stack = remap.get(sample.stack as usize).copied().unwrap_or(0);
        }
    }
    walks
}

/// The function probes' counters of this run: `now` less what they were at its start.
fn func_counters_since(now: FuncCounters, then: FuncCounters) -> FuncCounters {
    FuncCounters {
        entries: now.entries.saturating_sub(then.entries),
        returns: now.returns.saturating_sub(then.returns),
        overflows: now.overflows.saturating_sub(then.overflows),
        unmatched_returns: now.unmatched_returns.saturating_sub(then.unmatched_returns),
        abandoned_frames: now.abandoned_frames.saturating_sub(then.abandoned_frames),
        map_full: now.map_full.saturating_sub(then.map_full),
        clock_fallbacks: now.clock_fallbacks.saturating_sub(then.clock_fallbacks),
        _reserved: 0,
    }
}

/// The sampler's counters of this run: `now` less what they were at its start.
fn sampler_counters_since(now: SamplerCounters, then: SamplerCounters) -> SamplerCounters {
    SamplerCounters {
        samples: now.samples.saturating_sub(then.samples),
        lost_samples: now.lost_samples.saturating_sub(then.lost_samples),
        lost_kernel_stacks: now
            .lost_kernel_stacks
            .saturating_sub(then.lost_kernel_stacks),
        lost_user_stacks: now.lost_user_stacks.saturating_sub(then.lost_user_stacks),
    }
}

/// The sampling program's (run time, runs) in this run, from the kernel's totals now and at
/// the run's start: `None` when it did not run since (or the statistics were off).
fn runs_since(
    now: Option<(std::time::Duration, u64)>,
    then: Option<(std::time::Duration, u64)>,
) -> Option<(std::time::Duration, u64)> {
    match (now, then) {
        (Some((t, n)), Some((t0, n0))) if n > n0 => Some((t.saturating_sub(t0), n - n0)),
        (Some(_), Some(_)) => None,
        (now, _) => now,
    }
}

/// The CPython processes the sampler met, by pid, and whether their frames were walked.
fn python_seen(python: &HashMap<(u32, u32), PythonState>) -> Vec<PythonSeen> {
    let mut seen: Vec<PythonSeen> = python
        .iter()
        .filter_map(|((pid, _), state)| {
            let (version, frames) = match &state.detection {
                Detection::Python(p) => (p.version, true),
                Detection::Unsupported { version, .. } => (*version, false),
                Detection::NotPython => return None,
            };
            Some(PythonSeen {
                pid: *pid,
                version: format!("{}.{}", version.0, version.1),
                frames,
            })
        })
        .collect();
    seen.sort_by_key(|p| p.pid);
    seen
}

/// Where a code object just read at address `code` is kept, given the newest key of that
/// address and the function it holds: `(key, whether read is to be kept under it)`. The key
/// is the address with, in its top 16 bits (above any user address), how many times it was
/// found to hold another function.
fn next_code_key(
    code: u64,
    newest: Option<(u64, &PyFunction)>,
    read: Option<&PyFunction>,
) -> (u64, bool) {
    match (newest, read) {
        (Some((key, _)), None) => (key, false),
        (None, None) => (code, false),
        (Some((key, known)), Some(read)) if known == read => (key, false),
        (Some((key, _)), Some(_)) => {
            let reuses = ((key >> 48) + 1).min(0xFFFF);
            ((code & ((1 << 48) - 1)) | (reuses << 48), true)
        }
        (None, Some(_)) => (code & ((1 << 48) - 1), true),
    }
}

#[cfg(test)]
mod code_key_tests {
    use super::*;

    fn function(name: &str) -> PyFunction {
        PyFunction {
            qualname: name.into(),
            filename: "w.py".into(),
            line: 1,
        }
    }

    /// ```text
    /// address 0x7f00:  <module> (exec'd string) ── freed ── work_a
    /// stacks learnt:   S1 [<module>]                          S2 [work_a]
    /// ```
    /// S1 keeps `<module>` under the address, S2 gets a key of its own for `work_a`.
    #[test]
    fn a_reused_code_address_gets_a_new_key_and_the_old_stacks_keep_theirs() {
        let (module, work_a) = (function("<module>"), function("work_a"));
        let (first, keep) = next_code_key(0x7f00, None, Some(&module));
        assert_eq!((first, keep), (0x7f00, true));
        // Read again, still the same function: the same key.
        assert_eq!(
            next_code_key(0x7f00, Some((first, &module)), Some(&module)),
            (first, false)
        );
        // Another function there now: a new key, apart from the first.
        let (second, keep) = next_code_key(0x7f00, Some((first, &module)), Some(&work_a));
        assert!(keep);
        assert_ne!(second, first);
        assert_eq!(second & ((1 << 48) - 1), 0x7f00);
        // Unreadable (the process is gone): the newest key names it.
        assert_eq!(
            next_code_key(0x7f00, Some((second, &work_a)), None),
            (second, false)
        );
        assert_eq!(next_code_key(0x7f00, None, None), (0x7f00, false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(func: u32, outermost: bool, entry_ns: u64, child_ns: u64) -> FuncFrame {
        FuncFrame {
            func,
            flags: if outermost { FRAME_OUTERMOST } else { 0 },
            entry_ns,
            child_ns,
        }
    }

    /// ```text
    /// thread clock   100      200   250           400 (now)
    /// f (0)           [========================...
    /// g (1)                    [==========...
    /// f (0) again                    [=====...          (recursion: not outermost)
    /// g's completed callees: 10 ns
    /// ```
    #[test]
    fn calls_in_progress_are_timed_up_to_the_thread_clock() {
        let frames = [
            frame(0, true, 100, 0),
            frame(1, true, 200, 10),
            frame(0, false, 250, 0),
        ];
        assert_eq!(
            running_times(&frames, 400),
            vec![
                // f: 300 ns inclusive, its own part until g began.
                (0, 300, 100),
                // g: 200 inclusive; its own 50 until f began, less 10 in callees.
                (1, 200, 40),
                // The inner f: its own 150 ns, no inclusive time (the outer f has it).
                (0, 0, 150),
            ]
        );
        // A clock read behind an entry (a thread gone mid-read) gives nothing, not a wrap.
        assert_eq!(
            running_times(&[frame(2, true, 500, 0)], 400),
            vec![(2, 0, 0)]
        );
    }

    /// ```text
    /// read      1                 2                3
    /// f         completed 50 ns   completed 50 ns  completed 50 ns
    ///           + running 30 ns   + running 10 ns  (call ended, counted above)
    /// total     80                90 (not 100-30)   150
    /// reported  80                10                60
    /// ```
    #[test]
    fn a_function_time_never_goes_back_when_a_running_call_reads_short() {
        let key = (1, 0);
        let mut high_water = HashMap::new();
        let mut read = |done: u64, running_ns: u64, calls: u64| {
            let completed = HashMap::from([(key, (done, done))]);
            let running = HashMap::from([(key, (running_ns, running_ns))]);
            let calls = BTreeMap::from([(key, calls)]);
            call_deltas(&completed, &running, &calls, &mut high_water)
        };
        let first = read(50, 30, 1);
        assert_eq!(
            (first[0].calls, first[0].incl_ns, first[0].self_ns),
            (1, 80, 80)
        );
        let second = read(80, 10, 0);
        assert_eq!((second[0].calls, second[0].incl_ns), (0, 10));
        let third = read(150, 0, 1);
        assert_eq!((third[0].calls, third[0].incl_ns), (1, 60));
        // Nothing new: left out.
        assert!(read(150, 0, 0).is_empty());
    }

    #[test]
    fn pending_maps_are_looked_at_in_turns() {
        let pids = [10, 20, 30, 40, 50];
        let (turn, next) = turn_of(&pids, 0, 2);
        assert_eq!((turn, next), (vec![10, 20], 2));
        let (turn, next) = turn_of(&pids, 4, 2);
        assert_eq!((turn, next), (vec![50, 10], 6));
        // The turn wraps round the (changed) list, never taking a pid twice.
        let (turn, _) = turn_of(&pids[..2], 6, 8);
        assert_eq!(turn, vec![10, 20]);
        assert_eq!(turn_of(&[], 3, 8), (Vec::new(), 3));
    }

    #[test]
    fn intervals_merge_in_pairs_and_an_odd_last_one_stays() {
        let interval = |start_ns: u64| FunctionInterval {
            start_ns,
            duration_ns: 100,
            calls: vec![CallDelta {
                process: 1,
                func: 0,
                calls: 2,
                incl_ns: 10,
                self_ns: 5,
            }],
            ..FunctionInterval::default()
        };
        let merged = merged_in_pairs(vec![interval(0), interval(100), interval(200)]);
        assert_eq!(merged.len(), 2);
        assert_eq!((merged[0].start_ns, merged[0].duration_ns), (0, 200));
        assert_eq!(merged[0].calls[0].calls, 4);
        assert_eq!(merged[1], interval(200));
        assert!(merged_in_pairs(Vec::new()).is_empty());
    }

    #[test]
    fn samples_are_renumbered_to_distinct_named_stacks_and_walks_counted() {
        // Raw stacks 0 and 2 name the same frames; raw 1 is Python (not counted in walks).
        let mut table = StackTable::default();
        let remap: Vec<u32> = [vec![1, 2], vec![3], vec![1, 2]]
            .into_iter()
            .map(|stack| table.id(stack))
            .collect();
        assert_eq!(remap, vec![0, 1, 0]);
        assert_eq!(table.stacks, vec![vec![1, 2], vec![3]]);
        let native_only =
            BTreeMap::from([(0, (false, Walk::FramePointer)), (2, (true, Walk::Dwarf))]);
        let sample = |stack: u32, count: u64| SampleCount {
            process: 1,
            tid: 1,
            stack,
            count,
        };
        let mut intervals = vec![FunctionInterval {
            samples: vec![sample(0, 3), sample(1, 5), sample(2, 1), sample(9, 1)],
            ..FunctionInterval::default()
        }];
        let walks = renumber_samples(&mut intervals, &remap, &native_only);
        let stacks: Vec<u32> = intervals[0].samples.iter().map(|s| s.stack).collect();
        assert_eq!(stacks, vec![0, 1, 0, 0]);
        assert_eq!(
            walks,
            WalkCounts {
                frame_pointer: 3,
                frame_pointer_truncated: 0,
                dwarf: 1,
                dwarf_truncated: 1,
            }
        );
        assert_eq!(walks.truncated_pct(), Some(25.0));
        assert_eq!(WalkCounts::default().truncated_pct(), None);
    }

    #[test]
    fn a_run_counts_from_where_the_kernel_counters_stood_at_its_start() {
        let counters = |n: u64| FuncCounters {
            entries: n,
            returns: n,
            overflows: n,
            unmatched_returns: n,
            abandoned_frames: n,
            map_full: n,
            clock_fallbacks: n,
            _reserved: 0,
        };
        assert_eq!(func_counters_since(counters(10), counters(4)), counters(6));
        assert_eq!(func_counters_since(counters(4), counters(10)), counters(0));
        let sampler = |n: u64| SamplerCounters {
            samples: n,
            lost_samples: n,
            lost_kernel_stacks: n,
            lost_user_stacks: n,
        };
        assert_eq!(sampler_counters_since(sampler(9), sampler(2)), sampler(7));
        let ms = std::time::Duration::from_millis;
        assert_eq!(
            runs_since(Some((ms(30), 8)), Some((ms(10), 3))),
            Some((ms(20), 5))
        );
        // No run since the start: no figure; no start figure: all of it.
        assert_eq!(runs_since(Some((ms(30), 8)), Some((ms(30), 8))), None);
        assert_eq!(runs_since(Some((ms(30), 8)), None), Some((ms(30), 8)));
        assert_eq!(runs_since(None, Some((ms(30), 8))), None);
    }

    #[test]
    fn python_processes_are_listed_by_pid_and_say_whether_frames_were_walked() {
        let unsupported = |minor: u32| PythonState {
            detection: Detection::Unsupported {
                version: (3, minor),
                interpreter: "/usr/bin/python3".into(),
            },
            attempts: 1,
            read: 1,
        };
        let python = HashMap::from([
            ((30, 0), unsupported(6)),
            ((10, 1), unsupported(99)),
            (
                (20, 0),
                PythonState {
                    detection: Detection::NotPython,
                    attempts: 1,
                    read: 1,
                },
            ),
        ]);
        assert_eq!(
            python_seen(&python),
            vec![
                PythonSeen {
                    pid: 10,
                    version: "3.99".into(),
                    frames: false
                },
                PythonSeen {
                    pid: 30,
                    version: "3.6".into(),
                    frames: false
                },
            ]
        );
    }

    #[test]
    fn a_pending_spec_no_process_mapped_says_to_name_the_file_by_its_path() {
        let spec = |text: &str| FuncSpec::parse(text).expect("a valid SPEC");
        let pending = PendingSpecs {
            specs: vec![spec("libplugin.so:work*"), spec("libother.so:run")],
            matched: vec![true, false],
            ..PendingSpecs::default()
        };
        let notes = pending.unmatched_notes();
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("\"libother.so\"") && notes[0].contains("by its path"),
            "{}",
            notes[0]
        );
        let found = Found {
            functions: Vec::new(),
            files: vec![("/a/liba.so".into(), 1), ("/b/libb.so".into(), 2)],
        };
        assert_eq!(found.file_list(), "/a/liba.so, /b/libb.so");
    }

    #[test]
    fn specs_look_in_the_traced_program_and_only_the_machine_wide_mode_does_not_wait() {
        let proc_root = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(proc_root.path().join("42")).expect("pid dir");
        std::os::unix::fs::symlink("/usr/bin/app", proc_root.path().join("42/exe")).expect("link");
        let attach = lookup_scope(&Mode::Attach { pids: vec![42, 7] }, proc_root.path());
        assert_eq!(attach.executable, Some(PathBuf::from("/usr/bin/app")));
        assert_eq!((attach.pids, attach.defer_unloaded), (vec![42, 7], true));
        let system = lookup_scope(&Mode::System, proc_root.path());
        assert_eq!((system.executable, system.defer_unloaded), (None, false));
        let missing = proc_root.path().join("no-such-program");
        let wrap = Mode::Wrap {
            command: vec![missing.display().to_string()],
        };
        let wrap = lookup_scope(&wrap, proc_root.path());
        assert_eq!((wrap.executable, wrap.defer_unloaded), (None, true));
    }

    #[test]
    fn a_spec_without_a_file_refuses_a_script_and_names_the_way_out() {
        let dir = tempfile::tempdir().expect("temp dir");
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\nexec ./app\n").expect("script");
        let options = FunctionOptions {
            specs: vec![FuncSpec::parse("work*").expect("a valid SPEC")],
            ..FunctionOptions::default()
        };
        let mode = Mode::Wrap {
            command: vec![script.display().to_string()],
        };
        let err = resolve_specs(&options, &mode, dir.path(), &Notices::silent())
            .expect_err("a script has no symbols");
        let text = err.to_string();
        assert!(
            text.contains("is a script") && text.contains("--func /path/to/binary:work*"),
            "{text}"
        );
        // No SPEC: nothing to resolve, whatever the command.
        let none = resolve_specs(
            &FunctionOptions::default(),
            &mode,
            dir.path(),
            &Notices::silent(),
        );
        assert_eq!(none.expect("nothing to resolve"), Resolution::default());
    }

    #[test]
    fn a_thread_clock_is_the_first_figure_of_its_schedstat() {
        let proc_root = tempfile::tempdir().expect("temp dir");
        let task = proc_root.path().join("5/task/6");
        std::fs::create_dir_all(&task).expect("task dir");
        std::fs::write(task.join("schedstat"), "123456 789 10\n").expect("schedstat");
        assert_eq!(thread_cpu_ns(proc_root.path(), 5, 6), Some(123_456));
        // Gone, or garbage: no clock.
        assert_eq!(thread_cpu_ns(proc_root.path(), 5, 7), None);
        std::fs::write(task.join("schedstat"), "-1 x\n").expect("schedstat");
        assert_eq!(thread_cpu_ns(proc_root.path(), 5, 6), None);
        std::fs::create_dir_all(proc_root.path().join("8")).expect("pid dir");
        std::os::unix::fs::symlink("/usr/bin/python3.11", proc_root.path().join("8/exe"))
            .expect("link");
        assert!(exe_looks_like_python(proc_root.path(), 8));
        assert!(!exe_looks_like_python(proc_root.path(), 5));
    }
}
