//! A run: checks privileges, opens the energy sources, loads the probes, samples both every
//! interval until the mode's end (the command exits, the targets exit, `--duration`, Ctrl-C
//! or SIGTERM), and hands the [`Recording`] to the report. A run that is interrupted still
//! produces its report: every interval measured is kept.

pub mod accounting;
pub mod command;
pub mod energy;
pub mod functions;
pub mod live;
pub mod processes;
pub mod recorder;
pub mod targets;
mod ticker;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::atomic::{AtomicI32, AtomicU32, Ordering},
    time::{Duration, Instant, SystemTime},
};

use tokio::signal::unix::{Signal, SignalKind, signal};

use self::{
    command::CommandOutput,
    live::{LiveEvent, LiveHooks, LiveSample, LiveStart},
    processes::{Cleanup, Ending, ProcessRecord, ProcessTable},
    recorder::Recorder,
};
pub use crate::accounting::IdleWatts;
use crate::{
    accounting::BaselineInputs,
    attribution::{EnergyState, Glitch, Interval},
    host::HostInfo,
    privileges,
    probes::{
        FunctionProbeConfig, Losses, ProbeConfig, ProbeError, Probes,
        activity::{ActivityTracker, Snapshot},
        monotonic_ns,
    },
    sources::{
        self, DomainKind, DomainSpec, EnergySource, Provenance, ReadContext, SourceChoice,
        SourceNote, SourceOptions, SourceProbe, gpu::GpuSummary, meter::MeterSummary,
    },
};

/// What to trace.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// Run a command and follow it and its descendants.
    Wrap { command: Vec<String> },
    /// Follow running processes and the children they start.
    Attach { pids: Vec<u32> },
    /// Every process of the machine.
    System,
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Wrap { .. } => "wrap",
            Mode::Attach { .. } => "attach",
            Mode::System => "system",
        }
    }
}

/// Everything a run needs to know.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub mode: Mode,
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub sources: SourceOptions,
    pub idle_watts: IdleWatts,
    /// Length of the idle calibration window before the command starts (wrap mode, measured
    /// sources only).
    pub calibration: Duration,
    pub timeseries: bool,
    pub proc_root: PathBuf,
    /// Benchmarks only: attach probes that account nothing.
    pub noop_probes: bool,
    /// `--accounting`: how CPU time is read (`None`: chosen for the run's domains).
    pub accounting: Option<crate::probes::Accounting>,
    /// Function-level profiling (`--func`, `--profile`).
    pub functions: crate::functions::FunctionOptions,
    /// Whom the run is for: runs the wrapped command (see [`crate::privileges`]).
    pub invoker: crate::privileges::Invoker,
    /// Wrap mode: the report takes our stdout (`-o -`), so the command's goes to our stderr.
    pub command_stdout_to_stderr: bool,
    /// Where the session's remarks go (`app` prints them on stderr).
    pub notices: Notices,
    /// `cg-trace serve`: memory must not grow with time or churn: the interval store keeps
    /// a small window only (the report of such a run shows its last moments), exited
    /// processes are forgotten once their last time is read.
    pub bounded_memory: bool,
}

/// Errors that end a run before it measured anything; each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad input (no such pid, unusable source, bad option): exit code 2.
    #[error("{0}")]
    Usage(String),
    /// Missing privileges: exit code 2.
    #[error("{0}")]
    Privileges(String),
    #[error(transparent)]
    Source(#[from] sources::SourceError),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// The wrapped command could not be started: 127 (not found) or 126.
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("setting up signal handling: {0}")]
    Signals(#[source] std::io::Error),
    /// A stop signal came while starting, before anything was traced: exit 128 + N.
    #[error(
        "interrupted by {} while {during}: nothing was traced and no report written",
        StopRequest::from_signal(*signal).map_or("a signal", StopRequest::name)
    )]
    Interrupted { signal: i32, during: &'static str },
}

impl RunError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Usage(_) | RunError::Privileges(_) | RunError::Source(_) => 2,
            RunError::Spawn { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => 127,
                _ => 126,
            },
            // Stopped while starting (loading or attaching the probes): as if killed by that
            // signal.
            RunError::Probe(
                ProbeError::Interrupted { signal, .. } | ProbeError::LoadInterrupted { signal },
            )
            | RunError::Interrupted { signal, .. } => 128 + signal,
            RunError::Probe(_) | RunError::Signals(_) => 1,
        }
    }
}

/// One energy source as the run header and the report describe it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SourceInfo {
    pub name: &'static str,
    /// `measured` or `estimated`.
    pub provenance: Provenance,
    pub description: String,
    pub domains: Vec<String>,
}

/// What the agent itself cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ProfilerCost {
    pub cpu_time_s: f64,
    pub max_rss_bytes: u64,
    pub attach_ms: f64,
}

/// The facts of a run fixed once its sources are chosen: what is traced, on which machine,
/// with which domains and idle-baseline inputs. The live view gets it when the run starts
/// ([`LiveStart`]); the [`Recording`] carries the same to the report.
#[derive(Clone, Debug)]
pub struct RunHeader {
    pub mode: Mode,
    pub host: HostInfo,
    pub sources: Vec<SourceInfo>,
    pub selection_reason: String,
    /// What decides the run's idle baselines (the report's, the live view's and serve's):
    /// the domains, the interval, and each domain's known idle or rest power. A GPU's rest
    /// power is what was known at the start; the run's end brings what was seen during it.
    pub baseline: BaselineInputs,
}

impl RunHeader {
    /// Takes the domains, descriptions and idle inputs of `sources`, chosen for `reason`.
    fn set_sources(&mut self, sources: &[Box<dyn EnergySource>], reason: String) {
        self.baseline.domains = sources.iter().flat_map(|s| s.domains().to_vec()).collect();
        self.sources = sources
            .iter()
            .map(|s| SourceInfo {
                name: s.name(),
                provenance: s.provenance(),
                description: s.describe(),
                domains: s.domains().iter().map(|d| d.name.clone()).collect(),
            })
            .collect();
        self.selection_reason = reason;
        self.baseline.known_idle_w = known_idle(sources);
        self.baseline.rest_power = energy::rest_powers(sources);
        self.baseline.busy_slope_w = busy_slopes(sources);
    }

    /// The notice that says which sources the run uses and why.
    fn sources_chosen(&self, replaced: bool) -> Notice {
        Notice::SourcesChosen {
            names: self.sources.iter().map(|s| s.name).collect(),
            provenance: self.provenance(),
            reason: self.selection_reason.clone(),
            replaced,
        }
    }

    /// Whether the run's energy is measured or estimated (estimated as soon as one source is).
    pub fn provenance(&self) -> Provenance {
        Provenance::of_all(self.sources.iter().map(|s| s.provenance))
    }
}

/// Everything a run recorded: the input of the report.
#[derive(Debug)]
pub struct Recording {
    pub header: RunHeader,
    /// Names this run in the report (and ties the runs of a `--repeat` together).
    pub run_id: String,
    pub started_at: SystemTime,
    pub ended_at: SystemTime,
    /// CLOCK_MONOTONIC ns when the run (the command) started; intervals start from here.
    pub run_start_ns: u64,
    pub duration_ns: u64,
    pub recorder: Recorder,
    pub processes: Vec<ProcessRecord>,
    pub losses: Losses,
    /// Read errors of sources, with how many intervals each affected.
    pub source_errors: BTreeMap<String, u64>,
    pub stop_reason: String,
    pub command_ending: Option<Ending>,
    pub calibration_s: f64,
    /// Targets' CPU time read only after the run's last interval (a slice whose start the
    /// kernel did not report) and placed back into the intervals where its CPU had room.
    pub late_placed_ns: u64,
    /// Targets' CPU time that was read but could not be placed in any interval, even back
    /// (see [`ActivityTracker`] and [`Recorder::place_late`]); normally 0.
    pub carried_past_end_ns: u64,
    /// The same for other tasks: on a machine kept busy the last moments of read jitter.
    pub other_carried_past_end_ns: u64,
    /// Wrap mode: processes the command started that were still running when the run ended.
    pub still_running: Vec<RunningProcess>,
    pub profiler: ProfilerCost,
    /// How CPU time was read, and why.
    pub accounting: accounting::AccountingChoice,
    pub timeseries: bool,
    /// Every source probed when choosing, usable or not, and why.
    pub probes: Vec<SourceProbe>,
    /// Remarks of the sources: choosing (perf and powercap disagreeing), reading (GPU errors,
    /// gaps in a power log).
    pub source_notes: Vec<SourceNote>,
    /// Per GPU measured: identity and telemetry.
    pub gpus: Vec<GpuSummary>,
    /// The power meter's log, when one was given.
    pub meter: Option<MeterSummary>,
    /// Function-level data, when `--func` or `--profile` was used.
    pub functions: Option<functions::FunctionRecording>,
}

/// A process that outlived the run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RunningProcess {
    pub pid: u32,
    pub command: Vec<String>,
}

/// The result of a run.
#[derive(Debug)]
pub struct Outcome {
    pub recording: Recording,
    /// cg-trace's exit code: the command's in wrap mode.
    pub exit_code: i32,
}

/// What a session has to say to the person running it, as it happens; `app` words and prints
/// it (the session itself prints nothing).
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// A remark on the targets given (a thread id standing for its process, pid 1).
    Targets(String),
    /// The energy sources chosen, and why; told again when the calibration found a RAPL
    /// source's counters still and `auto` replaced it (`replaced`).
    SourcesChosen {
        names: Vec<&'static str>,
        provenance: Provenance,
        reason: String,
        replaced: bool,
    },
    /// A remark of the sources while choosing (perf and powercap disagreeing).
    SourceWarning(String),
    /// `--bench-noop-probes`: the figures are meaningless.
    NoopProbes,
    /// Wrap mode: a process the command started outlived the run.
    StillRunning(RunningProcess),
    /// The run was stopped before the command could start; says why.
    NeverStarted(String),
    /// A source measured nothing of the run (its energy is unknown): exit 2.
    MeasuredNothing(String),
    /// Function-level profiling's remark (`warning: ...` when it is one).
    Functions(String),
    /// `--repeat`: a run of the set is over.
    RunDone {
        /// `cg-trace compare`: which command's run (0: A, 1: B); `None` with `--repeat`.
        command: Option<usize>,
        warmup: bool,
        number: u32,
        of: u32,
        duration_s: f64,
    },
}

/// Where a session's [`Notice`]s go (called on the session's thread).
#[derive(Clone)]
pub struct Notices(std::sync::Arc<dyn Fn(&Notice) + Send + Sync>);

impl Notices {
    pub fn new(tell: impl Fn(&Notice) + Send + Sync + 'static) -> Self {
        Notices(std::sync::Arc::new(tell))
    }

    /// Keeps everything to itself (tests, benchmarks).
    pub fn silent() -> Self {
        Notices::new(|_| {})
    }

    fn tell(&self, notice: Notice) {
        (self.0)(&notice)
    }
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notices")
    }
}

/// Runs a whole session on a single-threaded tokio runtime.
pub fn run(config: RunConfig) -> Result<Outcome, RunError> {
    block_on(run_async(config, None))
}

/// Runs a whole session that a live view watches (see [`live`]): the same run as [`run`],
/// plus an observer called on every interval, a stop request, and the command's output
/// kept off the terminal.
pub fn run_live(config: RunConfig, hooks: LiveHooks) -> Result<Outcome, RunError> {
    block_on(run_async(config, Some(hooks)))
}

fn block_on<T>(
    future: impl std::future::Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Signals)?;
    runtime.block_on(future)
}

/// The three parts of a session: setup (sources, probes, calibration), one measured run,
/// and its conclusion (the recording).
async fn run_async(config: RunConfig, hooks: Option<LiveHooks>) -> Result<Outcome, RunError> {
    let mut setup = set_up(config, hooks).await?;
    let measured = measure(&mut setup).await?;
    Ok(conclude(&mut setup, measured))
}

/// `--repeat N [--warmup K] [--cooldown SECS]`, or `cg-trace compare`: how a run set goes.
#[derive(Clone, Debug, PartialEq)]
pub struct RepeatPlan {
    /// Measured runs (of each command).
    pub runs: u32,
    /// Unmeasured runs before them (of each command).
    pub warmup: u32,
    /// Pause between runs.
    pub cooldown: Duration,
    /// `cg-trace compare`: the commands run in turn (A B A B ...), each `runs` times, so that
    /// a drifting machine weighs on all alike; empty: the config's own command.
    pub commands: Vec<Vec<String>>,
    /// A command run before every run (warm-up or measured), traced but not kept, and
    /// before the pause: `--prepare`.
    pub prepare: Option<Vec<String>>,
}

/// The result of a run set.
#[derive(Debug)]
pub struct RepeatOutcome {
    /// The measured runs completed, in order (a run cut short by a stop request is left out,
    /// unless no run was completed: then it is the only one).
    pub runs: Vec<Recording>,
    /// For each of `runs`, the index of its command in [`RepeatPlan::commands`] (0 without).
    pub commands: Vec<usize>,
    /// Why fewer runs than asked were measured.
    pub stopped_early: Option<String>,
    /// The exit code: the command's first failure (as for a single run), 128 + N when
    /// stopped by signal N, else 0.
    pub exit_code: i32,
}

/// One step of a run set.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// `--prepare` before the run that follows.
    Prepare,
    /// A run of command `command`: the `number`th of its warm-up or measured runs.
    Run {
        command: usize,
        warmup: bool,
        number: u32,
    },
}

/// The steps of `plan`, in order: round by round, each command in turn, each run after its
/// `--prepare`.
fn schedule(plan: &RepeatPlan) -> Vec<Step> {
    let commands = plan.commands.len().max(1);
    let mut steps = Vec::new();
    for round in 0..plan.warmup + plan.runs {
        let warmup = round < plan.warmup;
        let number = if warmup {
            round + 1
        } else {
            round - plan.warmup + 1
        };
        for command in 0..commands {
            if plan.prepare.is_some() {
                steps.push(Step::Prepare);
            }
            steps.push(Step::Run {
                command,
                warmup,
                number,
            });
        }
    }
    steps
}

/// Runs the command of `config` (wrap mode), or each of `plan.commands` in turn,
/// `plan.warmup` times unmeasured and `plan.runs` times measured, with one setup and one idle
/// calibration for all. Each run is concluded as a single run would be (a power log settles
/// per run), so each has its own recording. A command that fails, a `--prepare` that fails,
/// or a stop request, ends the set.
pub fn run_repeat(config: RunConfig, plan: RepeatPlan) -> Result<RepeatOutcome, RunError> {
    block_on(run_repeat_async(config, plan))
}

async fn run_repeat_async(config: RunConfig, plan: RepeatPlan) -> Result<RepeatOutcome, RunError> {
    let mut setup = set_up(config, None).await?;
    let own_command = setup.config.mode.clone();
    let mut outcome = RepeatOutcome {
        runs: Vec::new(),
        commands: Vec::new(),
        stopped_early: None,
        exit_code: 0,
    };
    for (i, step) in schedule(&plan).into_iter().enumerate() {
        if i > 0
            && let Some(request) = between_runs(&mut setup, plan.cooldown).await
        {
            outcome.exit_code = 128 + request.signal();
            outcome.stopped_early = Some(format!("interrupted by {} between runs", request.name()));
            break;
        }
        let mode = match (step, &plan.prepare) {
            (Step::Prepare, Some(prepare)) => Mode::Wrap {
                command: prepare.clone(),
            },
            (Step::Run { command, .. }, _) if !plan.commands.is_empty() => Mode::Wrap {
                command: plan.commands[command].clone(),
            },
            _ => own_command.clone(),
        };
        setup.config.mode = mode.clone();
        setup.header.mode = mode;
        let measured = measure(&mut setup).await?;
        let requested = measured.requested;
        let concluded = conclude(&mut setup, measured);
        if !record_step(
            &mut outcome,
            step,
            &plan,
            concluded,
            requested,
            &setup.config,
        ) {
            break;
        }
    }
    Ok(outcome)
}

/// Files one step's run in `outcome`; false when the set ends there (a stop request, a
/// failure).
fn record_step(
    outcome: &mut RepeatOutcome,
    step: Step,
    plan: &RepeatPlan,
    concluded: Outcome,
    requested: Option<StopRequest>,
    config: &RunConfig,
) -> bool {
    let recording = concluded.recording;
    let Step::Run {
        command,
        warmup,
        number,
    } = step
    else {
        // --prepare: not kept; it ends the set when stopped or failing.
        let why = match requested {
            Some(request) => format!("interrupted by {} in --prepare", request.name()),
            None if concluded.exit_code != 0 => format!(
                "--prepare failed ({})",
                ending_words(&recording, concluded.exit_code)
            ),
            None => return true,
        };
        outcome.exit_code = concluded.exit_code.max(1);
        outcome.stopped_early = Some(why);
        return false;
    };
    config.notices.tell(Notice::RunDone {
        command: (!plan.commands.is_empty()).then_some(command),
        warmup,
        number,
        of: if warmup { plan.warmup } else { plan.runs },
        duration_s: recording.duration_ns as f64 / 1e9,
    });
    let kind = if warmup { "warm-up" } else { "measured" };
    if let Some(request) = requested {
        outcome.exit_code = concluded.exit_code;
        outcome.stopped_early = Some(format!(
            "interrupted by {} in {kind} run {number}",
            request.name()
        ));
        // The run cut short is not one of the set, unless there is nothing else to show.
        if outcome.runs.is_empty() {
            outcome.runs.push(recording);
            outcome.commands.push(command);
        }
        return false;
    }
    if concluded.exit_code != 0 {
        outcome.exit_code = concluded.exit_code;
        outcome.stopped_early = Some(format!(
            "{kind} run {number} failed ({})",
            ending_words(&recording, concluded.exit_code)
        ));
        if !warmup || outcome.runs.is_empty() {
            outcome.runs.push(recording);
            outcome.commands.push(command);
        }
        return false;
    }
    if !warmup {
        outcome.runs.push(recording);
        outcome.commands.push(command);
    }
    true
}

/// How a failed run ended, in words.
fn ending_words(recording: &Recording, exit_code: i32) -> String {
    match recording.command_ending {
        Some(Ending::Signaled(sig)) => format!("killed by signal {sig}"),
        Some(Ending::Exited(code)) => format!("exit status {code}"),
        // --duration reached, or a source that measured nothing.
        None => format!("{}, exit status {exit_code}", recording.stop_reason),
    }
}

/// Between two runs of a set: `cooldown` of sampling that records nothing, ending with a
/// sample just before the next run starts (so that its first interval holds none of the
/// pause, nor the time the previous run took to conclude). A stop request ends it.
async fn between_runs(setup: &mut Setup, cooldown: Duration) -> Option<StopRequest> {
    let period = setup
        .config
        .interval
        .min(cooldown)
        .max(Duration::from_millis(10));
    let end = Instant::now() + cooldown;
    let mut tick = ticker::Ticker::new(period);
    setup.sampler.sample(Phase::Gap);
    while Instant::now() < end {
        tokio::select! {
            _ = tick.tick() => setup.sampler.sample(Phase::Gap),
            request = setup.signals.recv() => return Some(request),
        }
    }
    setup.sampler.sample(Phase::Gap);
    None
}

/// Why a run was asked to stop: a signal, or the live view's quit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopRequest {
    Interrupt,
    Terminate,
    Hangup,
    /// The live view quit (`q`), or its terminal hung up.
    Quit,
}

impl StopRequest {
    /// The request a stop signal makes (SIGINT, SIGTERM, SIGHUP).
    fn from_signal(signal: i32) -> Option<Self> {
        match signal {
            libc::SIGINT => Some(StopRequest::Interrupt),
            libc::SIGTERM => Some(StopRequest::Terminate),
            libc::SIGHUP => Some(StopRequest::Hangup),
            _ => None,
        }
    }

    /// The signal a wrapped command gets for it, and whose number makes cg-trace's exit
    /// status (128 + N): a quit is a Ctrl-C that the view's raw terminal did not send.
    pub fn signal(self) -> i32 {
        match self {
            StopRequest::Interrupt | StopRequest::Quit => libc::SIGINT,
            StopRequest::Terminate => libc::SIGTERM,
            StopRequest::Hangup => libc::SIGHUP,
        }
    }

    fn name(self) -> &'static str {
        match self {
            StopRequest::Interrupt | StopRequest::Quit => "SIGINT",
            StopRequest::Terminate => "SIGTERM",
            StopRequest::Hangup => "SIGHUP",
        }
    }
}

/// How the sampling loop ended.
enum Stop {
    CommandExited(Ending),
    TargetsExited,
    Duration,
    Requested(StopRequest),
}

/// A session ready to measure: sources open, probes loaded, calibration done.
struct Setup {
    config: RunConfig,
    header: RunHeader,
    sampler: Sampler,
    signals: Signals,
    /// Wrap mode under the live view: where the command's output goes.
    command_output: Option<PathBuf>,
    calibration_s: f64,
    /// A stop request that came during the calibration: the command is never started.
    early_stop: Option<StopRequest>,
    attach_ms: f64,
    selection_notes: Vec<SourceNote>,
    selection_probes: Vec<SourceProbe>,
    /// The kernel side's losses when the run started (the previous run of a set ended).
    losses_before: Losses,
    /// The open-coded walk's reads when the run started.
    reads_before: crate::probes::task_walk::WalkReads,
    accounting: accounting::AccountingChoice,
}

/// One measured run, before its conclusion.
struct Measured {
    stop: Stop,
    /// A stop request came, even if the command then exited by itself.
    requested: Option<StopRequest>,
    /// Wrap mode: whether the command was started.
    spawned: bool,
    child_pid: u32,
    started_at: SystemTime,
    late: LateTime,
    still_running: Vec<RunningProcess>,
    run_end_ns: u64,
}

/// Privileges, targets, sources, probes, and the idle calibration. A stop signal at any
/// point of it ends the run: until the probes are in place with [`RunError::Interrupted`]
/// (or the probes' own interrupted errors), after that as a stop request that comes before
/// the command is started (see [`Signals`]).
async fn set_up(mut config: RunConfig, hooks: Option<LiveHooks>) -> Result<Setup, RunError> {
    let (observer, quit, command_output) = match hooks {
        Some(h) => (Some(h.observer), Some(h.stop), h.command_output),
        None => (None, None, None),
    };
    // First of all, so that no stop signal of the start-up is lost.
    let mut signals = Signals::new(quit).map_err(RunError::Signals)?;
    privileges::check_can_trace().map_err(RunError::Privileges)?;
    check_attach_targets(&mut config)?;
    let host = HostInfo::read();
    let selection = sources::select(&config.sources, &host)?;
    let domains: Vec<DomainSpec> = selection
        .sources
        .iter()
        .flat_map(|s| s.domains().to_vec())
        .collect();
    validate_idle_watts(&config.idle_watts, &domains)?;
    let probed = functions::resolve_specs(
        &config.functions,
        &config.mode,
        &config.proc_root,
        &config.notices,
    )
    .map_err(|err| RunError::Usage(err.to_string()))?;
    let function_probes = !probed.functions.is_empty() || !probed.pending.is_empty();
    let accounting_choice = choose_accounting(&config, &domains, &host, function_probes)?;
    let mut header = run_header(&config, host, &selection);

    signals.stop_here("choosing the sources and the functions to probe")?;
    if config.noop_probes {
        config.notices.tell(Notice::NoopProbes);
    }
    let probe_config = probe_config(&config, &accounting_choice, function_probes);
    let mut stop = || signals.received().map(StopRequest::signal);
    let mut probes = Probes::load(&probe_config, &mut stop)?;
    let accounting_choice = accounting_choice
        .with_final_runtimes(probes.free_backup)
        .with_walker(probes.walker());
    let function_session = if config.functions.any() {
        Some(functions::FunctionSession::start(
            &config.functions,
            probed,
            &mut probes,
            &config.proc_root,
            &config.notices,
            &mut stop,
        )?)
    } else {
        None
    };
    signals.stop_here("attaching the probes")?;
    let attach_ms = probes.attach_time.as_secs_f64() * 1e3;
    let mut sampler = Sampler::new(
        &config,
        probes,
        selection.sources,
        header.baseline.domains.len(),
        observer,
        function_session,
    );
    sampler.sample(Phase::Prime);

    let mut probes_seen = selection.probes;
    let (calibration_s, early_stop) = calibrate(
        &config,
        &mut header,
        &mut sampler,
        &mut signals,
        &mut probes_seen,
    )
    .await?;
    // A signal since the last step: the command is not started.
    let early_stop = early_stop.or_else(|| signals.received());
    Ok(Setup {
        config,
        header,
        sampler,
        signals,
        command_output,
        calibration_s,
        early_stop,
        attach_ms,
        selection_notes: selection.notes,
        selection_probes: probes_seen,
        losses_before: Losses::default(),
        reads_before: Default::default(),
        accounting: accounting_choice,
    })
}

/// Attach mode: keeps the pids that can be followed, and says why of the others.
fn check_attach_targets(config: &mut RunConfig) -> Result<(), RunError> {
    if let Mode::Attach { pids } = &mut config.mode {
        let (checked, warnings) =
            targets::check(&config.proc_root, pids).map_err(RunError::Usage)?;
        for warning in warnings {
            config.notices.tell(Notice::Targets(warning));
        }
        *pids = checked;
    }
    Ok(())
}

/// The run's accounting (`--accounting`, or chosen for its domains), logged with its reason.
fn choose_accounting(
    config: &RunConfig,
    domains: &[DomainSpec],
    host: &HostInfo,
    function_probes: bool,
) -> Result<accounting::AccountingChoice, RunError> {
    let choice = accounting::choose(
        config.accounting,
        accounting::Needs {
            domains,
            cpu_count: host.cpu_count(),
            function_probes,
            noop_switch: config.noop_probes,
        },
    )
    .map_err(RunError::Usage)?;
    tracing::info!("accounting: {} ({})", choice.method, choice.reason);
    Ok(choice)
}

/// The run's header for the sources `selection` chose; tells what was chosen and the
/// selection's warnings.
fn run_header(config: &RunConfig, host: HostInfo, selection: &sources::Selection) -> RunHeader {
    for source in &selection.sources {
        tracing::info!("energy source: {}", source.describe());
    }
    let prior_slope_w_per_cpu =
        sources::model::ModelParams::defaults(host.cpu_count(), &host.cpu_model)
            .watts_per_busy_cpu(host.cpu_count());
    let mut header = RunHeader {
        mode: config.mode.clone(),
        sources: Vec::new(),
        selection_reason: String::new(),
        host,
        baseline: BaselineInputs {
            domains: Vec::new(),
            idle_watts: config.idle_watts.clone(),
            known_idle_w: Vec::new(),
            rest_power: Vec::new(),
            busy_slope_w: Vec::new(),
            interval: config.interval,
            prior_slope_w_per_cpu,
        },
    };
    header.set_sources(&selection.sources, selection.reason.clone());
    config.notices.tell(header.sources_chosen(false));
    for note in &selection.notes {
        config
            .notices
            .tell(Notice::SourceWarning(note.text.clone()));
    }
    header
}

/// What the probes are loaded with.
fn probe_config(
    config: &RunConfig,
    accounting: &accounting::AccountingChoice,
    function_probes: bool,
) -> ProbeConfig {
    ProbeConfig {
        accounting: accounting.accounting(),
        all_tasks: config.mode == Mode::System,
        spawner_tgid: matches!(config.mode, Mode::Wrap { .. }).then(std::process::id),
        targets: match &config.mode {
            Mode::Attach { pids } => pids.clone(),
            _ => Vec::new(),
        },
        noop_switch: config.noop_probes,
        functions: FunctionProbeConfig {
            uprobes: function_probes,
            noop_uprobes: config.functions.bench_empty_probes,
            sampling: config.functions.profile,
            sample_hz: config.functions.sample_hz,
            interval: config.interval,
            copy_stacks: config.functions.stacks.copies_stacks(),
        },
        iter_task_only: std::env::var_os(crate::probes::ITER_TASK_ENV).is_some_and(|v| v == "1"),
    }
}

/// The idle calibration (wrap mode): the machine without the command, to anchor the idle
/// fit. It needs a source that measures something: any one of them (a GPU's beside the
/// model), not all (the report's provenance rule). `auto` replaces a RAPL source whose
/// counters stood still through it, and calibrates again. Returns how long the last window
/// lasted and the stop request that cut it short, if one did.
async fn calibrate(
    config: &RunConfig,
    header: &mut RunHeader,
    sampler: &mut Sampler,
    signals: &mut Signals,
    probes: &mut Vec<SourceProbe>,
) -> Result<(f64, Option<StopRequest>), RunError> {
    let wanted = |sampler: &Sampler| {
        matches!(config.mode, Mode::Wrap { .. })
            && sampler
                .sources
                .iter()
                .any(|s| s.provenance() == Provenance::Measured)
            && !config.calibration.is_zero()
            && config.idle_watts == IdleWatts::Estimate
    };
    let mut calibration_s = 0.0;
    while wanted(sampler) {
        tracing::info!(
            "probes in place; idle calibration for up to {} ms before the command starts",
            config.calibration.as_millis()
        );
        let started = Instant::now();
        let mut tick = tokio::time::interval(config.interval.min(config.calibration));
        tick.tick().await;
        let mut stop = None;
        while started.elapsed() < config.calibration {
            tokio::select! {
                _ = tick.tick() => sampler.sample(Phase::Calibration),
                request = signals.recv() => { stop = Some(request); break; }
            }
        }
        sampler.sample(Phase::Calibration);
        calibration_s = started.elapsed().as_secs_f64();
        if stop.is_some() {
            return Ok((calibration_s, stop));
        }
        if config.sources.choice != SourceChoice::Auto
            || !replace_still_source(config, header, sampler, probes)?
        {
            break;
        }
    }
    Ok((calibration_s, None))
}

/// After a calibration: replaces the first RAPL source whose counters stood still through it
/// (see [`still_during_calibration`]) with the next one `auto` picks, says so, and tells
/// whether it did.
fn replace_still_source(
    config: &RunConfig,
    header: &mut RunHeader,
    sampler: &mut Sampler,
    probes: &mut Vec<SourceProbe>,
) -> Result<bool, RunError> {
    let widths: Vec<(&'static str, usize)> = sampler
        .sources
        .iter()
        .map(|s| (s.name(), s.domains().len()))
        .collect();
    let Some((index, err)) = still_during_calibration(
        &widths,
        &header.baseline.domains,
        sampler.recorder.calibration(),
    ) else {
        return Ok(false);
    };
    let fallback = sources::select::fall_back(
        &config.sources,
        &header.host,
        sampler.sources[index].name(),
        sampler.sources[index].domains(),
        err,
    )?;
    sampler.replace_source(index, fallback.source);
    let gpus = sampler
        .sources
        .iter()
        .filter(|s| s.name() == "nvml")
        .map(|s| sources::select::gpu_reason(s.as_ref()));
    let reason = std::iter::once(fallback.reason)
        .chain(gpus)
        .collect::<Vec<_>>()
        .join("; ");
    header.set_sources(&sampler.sources, reason);
    replace_probes(probes, fallback.probes);
    config.notices.tell(header.sources_chosen(true));
    Ok(true)
}

/// One measured run: starts the command (wrap mode), samples every interval until the
/// mode's end or a stop request, and gives the time still carried its room.
async fn measure(setup: &mut Setup) -> Result<Measured, RunError> {
    let started_at = SystemTime::now();
    setup.sampler.run_start_ns = monotonic_ns();
    let mut child = start_command(setup)?;
    let child_pid = child.as_ref().and_then(|c| c.id()).unwrap_or(0);
    let sampler = &mut setup.sampler;
    if let Some(observer) = sampler.observer.as_mut() {
        observer(LiveEvent::Started(LiveStart {
            header: &setup.header,
            run_start_ns: sampler.run_start_ns,
            calibration: sampler.recorder.calibration(),
        }));
    }
    let (stop, requested) = match setup.early_stop {
        Some(request) => (Stop::Requested(request), Some(request)),
        None => {
            let (config, signals) = (&setup.config, &mut setup.signals);
            sample_until_stop(config, sampler, signals, child.as_mut(), child_pid).await
        }
    };
    sampler.sample(Phase::Run);
    drain_owed_time(sampler).await;
    // What is still owed is a slice the kernel reported only when it ended (it missed the
    // switch that started it, so no read showed it running): it ran during the run, while its
    // CPU looked idle, and goes back there (see Recorder::place_late).
    let late = place_late_time(sampler);
    let still_running = still_running(&setup.config, sampler);
    Ok(Measured {
        stop,
        requested,
        spawned: child.is_some(),
        child_pid,
        started_at,
        late,
        still_running,
        run_end_ns: monotonic_ns(),
    })
}

/// Wrap mode, unless a stop came first: starts the command, followed from now on.
fn start_command(setup: &mut Setup) -> Result<Option<tokio::process::Child>, RunError> {
    let config = &setup.config;
    let Mode::Wrap { command } = &config.mode else {
        return Ok(None);
    };
    if setup.early_stop.is_some() {
        return Ok(None);
    }
    let output = match (&setup.command_output, config.command_stdout_to_stderr) {
        (Some(path), _) => CommandOutput::File(path.clone()),
        (None, true) => CommandOutput::StdoutToStderr,
        (None, false) => CommandOutput::Inherit,
    };
    let spawned =
        command::spawn(command, &config.invoker, &output).map_err(|source| RunError::Spawn {
            program: command[0].clone(),
            source,
        })?;
    let sampler = &mut setup.sampler;
    sampler
        .table
        .add_root(spawned.id().unwrap_or(0), sampler.run_start_ns);
    Ok(Some(spawned))
}

/// Samples every interval until the mode's end or a stop request; returns how it ended and
/// the stop request that came, if one did (even if the command then exited by itself).
async fn sample_until_stop(
    config: &RunConfig,
    sampler: &mut Sampler,
    signals: &mut Signals,
    mut child: Option<&mut tokio::process::Child>,
    child_pid: u32,
) -> (Stop, Option<StopRequest>) {
    let deadline = config.duration.map(|d| Instant::now() + d);
    let mut tick = ticker::Ticker::new(config.interval);
    // With intervals longer than EVENT_DRAIN_PERIOD the kernel's event ring is also emptied
    // in between, so that a fork storm does not fill it between two long intervals. (At
    // shorter intervals the extra wakeups would only cost: the ring holds ~5,000 events.)
    let drain_between = config.interval > EVENT_DRAIN_PERIOD;
    let mut drain_tick = tokio::time::interval(EVENT_DRAIN_PERIOD);
    drain_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    drain_tick.tick().await;
    // The samples too, where the ring would fill within an interval (many CPUs at a high
    // rate): a thread copies them out of it all along, and reading (unwinding) them this often
    // keeps the copies that wait few.
    let ring_period = sampler
        .probes
        .sample_ring_read_period()
        .filter(|period| *period < config.interval);
    let mut ring_tick = tokio::time::interval(ring_period.unwrap_or(config.interval));
    ring_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ring_tick.tick().await;
    let mut requested = None;
    // One timer for the whole run (made anew on every tick, it was registered and cancelled
    // ten times a second).
    let until_deadline = deadline.map_or(Duration::from_secs(86_400 * 365), |d| {
        d.saturating_duration_since(Instant::now())
    });
    let deadline_reached = tokio::time::sleep(until_deadline);
    tokio::pin!(deadline_reached);
    let stop = loop {
        tokio::select! {
            _ = drain_tick.tick(), if drain_between => sampler.drain_events(),
            _ = ring_tick.tick(), if ring_period.is_some() => sampler.read_sample_ring(),
            _ = tick.tick() => {
                sampler.sample(Phase::Run);
                if matches!(config.mode, Mode::Attach { .. }) && sampler.table.live_targets() == 0 {
                    break Stop::TargetsExited;
                }
            }
            _ = &mut deadline_reached => {
                break match child.as_deref_mut() {
                    Some(c) => wind_down(c, child_pid, libc::SIGTERM, sampler, signals, config.interval)
                        .await
                        .map_or(Stop::Duration, Stop::CommandExited),
                    None => Stop::Duration,
                };
            }
            status = wait_child(child.as_deref_mut()) => {
                break Stop::CommandExited(status);
            }
            request = signals.recv() => {
                requested = Some(request);
                break match child.as_deref_mut() {
                    Some(c) => {
                        // A Ctrl-C typed in the terminal already reached the command (it is
                        // in our foreground process group); anything else is forwarded. Under
                        // the live view the terminal is in raw mode and sends no signals, and
                        // a quit is the Ctrl-C that never reached the command.
                        let forward = signals.quit.is_some()
                            || !(request == StopRequest::Interrupt && shares_foreground_terminal());
                        let forward_sig = if forward { request.signal() } else { 0 };
                        wind_down(c, child_pid, forward_sig, sampler, signals, config.interval)
                            .await
                            .map_or(Stop::Requested(request), Stop::CommandExited)
                    }
                    None => Stop::Requested(request),
                };
            }
        }
    };
    (stop, requested)
}

/// Gives the time still owed its room: targets' time read beyond what the last intervals
/// could hold (see ActivityTracker) takes a few short intervals more, so that nothing measured
/// is lost; in iterator accounting, so do threads whose final runtime is still to come (the
/// kernel frees a task a moment after it was reaped; iterator::FINAL_WAIT_NS bounds the
/// wait), and final runtimes that came in after the last read (a sample drains events once
/// more after its snapshot).
async fn drain_owed_time(sampler: &mut Sampler) {
    let mut drains = 0;
    while drains < DRAIN_INTERVALS_MAX
        && ((drains < DRAIN_INTERVALS && sampler.tracker.carried_target_ns() > 0)
            || sampler.probes.awaits_final())
    {
        drains += 1;
        tokio::time::sleep(DRAIN_INTERVAL).await;
        sampler.sample(Phase::Run);
    }
}

/// Wrap mode: what cg-trace started that outlived the run (a command that ignored the stop
/// signal, or a daemon it started), told as a notice: the user should know.
fn still_running(config: &RunConfig, sampler: &mut Sampler) -> Vec<RunningProcess> {
    if !matches!(config.mode, Mode::Wrap { .. }) {
        return Vec::new();
    }
    let still_running: Vec<RunningProcess> = sampler
        .table
        .still_running()
        .into_iter()
        .map(|r| RunningProcess {
            pid: r.pid,
            command: if r.cmdline.is_empty() {
                vec![r.comm.clone()]
            } else {
                r.cmdline.clone()
            },
        })
        .collect();
    for process in &still_running {
        config.notices.tell(Notice::StillRunning(process.clone()));
    }
    still_running
}

/// What the end of a run did with time read too late for its intervals.
#[derive(Clone, Copy, Debug, Default)]
struct LateTime {
    /// Targets' time placed back into the run's intervals.
    placed_ns: u64,
    /// Targets' time that found no room (not charged).
    unplaced_ns: u64,
    /// Other tasks' time that found no room or whose room a target's late time took.
    other_unplaced_ns: u64,
}

/// Hands the time still carried at the end of a run to the recorder (see
/// [`Recorder::place_late`]).
fn place_late_time(sampler: &mut Sampler) -> LateTime {
    let carried = sampler.tracker.take_carried();
    let mut late = LateTime::default();
    // Estimates that follow CPU activity follow the placed time too.
    let joules_per_busy_ns: Vec<f64> = sampler
        .sources
        .iter()
        .flat_map(|source| {
            source
                .joules_per_busy_ns()
                .filter(|j| j.len() == source.domains().len())
                .unwrap_or_else(|| vec![0.0; source.domains().len()])
        })
        .collect();
    let mut busier = |interval: &mut Interval, ns: u64| {
        for (domain, &per_ns) in joules_per_busy_ns.iter().enumerate() {
            if per_ns != 0.0
                && let Some((joules, _)) = interval.energy_mut(domain)
            {
                *joules += per_ns * ns as f64;
            }
        }
    };
    let now_ns = monotonic_ns();
    for (thread, cpu, ns) in carried.threads {
        let id = sampler.table.id_of_thread(thread, now_ns);
        let not_before_ns = sampler.table.records()[id as usize]
            .start_ns
            .map_or(0, |s| s.saturating_sub(sampler.run_start_ns));
        let placement =
            sampler
                .recorder
                .place_late((id, thread.tid), cpu, ns, not_before_ns, &mut busier);
        late.placed_ns += placement.placed_ns;
        late.unplaced_ns += ns - placement.placed_ns;
        late.other_unplaced_ns += placement.displaced_other_ns;
    }
    for (cpu, ns) in carried.other_ns_per_cpu.into_iter().enumerate() {
        late.other_unplaced_ns += ns
            - sampler
                .recorder
                .place_late_other(cpu as u32, ns, &mut busier);
    }
    late
}

/// The end of a measured run: its exit code, the sources' last word (a power log settles),
/// and the [`Recording`]. The sampler is left ready for another run.
fn conclude(setup: &mut Setup, measured: Measured) -> Outcome {
    let Measured {
        stop,
        requested: _,
        spawned,
        child_pid,
        started_at,
        late,
        still_running,
        run_end_ns,
    } = measured;
    let (stop_reason, exit_code, command_ending) =
        how_it_stopped(setup, stop, spawned, child_pid, run_end_ns);
    let config = &setup.config;
    let sampler = &mut setup.sampler;
    let losses_so_far = sampler.probes.losses().unwrap_or_default();
    let losses = losses_since(losses_so_far, setup.losses_before);
    setup.losses_before = losses_so_far;
    let reads_so_far = sampler.probes.walk_reads();
    let accounting = setup
        .accounting
        .clone()
        .with_reads(reads_so_far.map(|now| now.since(setup.reads_before)));
    setup.reads_before = reads_so_far.unwrap_or_default();
    let (source_notes, reports, settle_error) = settle_energy(
        sampler,
        &setup.selection_notes,
        &setup.header.baseline.domains,
    );
    let exit_code = match settle_error {
        // A source that measured nothing of the run (a power log without a sample in it):
        // bad input. The report still says what was measured.
        Some(err) => {
            config
                .notices
                .tell(Notice::MeasuredNothing(err.to_string()));
            2
        }
        None => exit_code,
    };
    let function_recording = sampler.functions.as_mut().map(|f| {
        f.next_run(&sampler.probes)
            .finish(&sampler.probes, signalled_from_now())
    });
    let recorder = sampler.next_run();
    let table = std::mem::replace(
        &mut sampler.table,
        ProcessTable::new(config.mode == Mode::System, &config.proc_root),
    );
    // Processes waiting to be retired are the old table's (threads are named by the kernel's
    // keys and keep waiting).
    sampler.pending.processes.clear();
    let mut header = setup.header.clone();
    header.baseline.busy_slope_w = reports.busy_slope_w;
    header.baseline.rest_power = reports.rest_power;
    Outcome {
        exit_code,
        recording: Recording {
            header,
            run_id: run_id(started_at),
            started_at,
            ended_at: SystemTime::now(),
            run_start_ns: sampler.run_start_ns,
            duration_ns: recorder.intervals().iter().map(|i| i.duration_ns).sum(),
            recorder,
            processes: table.records().to_vec(),
            losses,
            source_errors: std::mem::take(&mut sampler.source_errors),
            stop_reason,
            command_ending,
            calibration_s: setup.calibration_s,
            late_placed_ns: late.placed_ns,
            carried_past_end_ns: late.unplaced_ns,
            other_carried_past_end_ns: late.other_unplaced_ns,
            still_running,
            profiler: ProfilerCost {
                attach_ms: setup.attach_ms,
                ..own_cost()
            },
            accounting,
            timeseries: config.timeseries,
            probes: setup.selection_probes.clone(),
            source_notes,
            gpus: reports.gpus,
            meter: reports.meter,
            functions: function_recording,
        },
    }
}

/// Why the run stopped, in words, the exit code that goes with it, and how the wrapped
/// command ended (recorded in the process table). A wrapped command stopped by a signal, or
/// never started because the signal came during the idle calibration, exits as if
/// interrupted (not 0: the command did not succeed).
fn how_it_stopped(
    setup: &mut Setup,
    stop: Stop,
    spawned: bool,
    child_pid: u32,
    run_end_ns: u64,
) -> (String, i32, Option<Ending>) {
    let config = &setup.config;
    let wrap = matches!(config.mode, Mode::Wrap { .. });
    let never_started = match (wrap && !spawned, setup.calibration_s > 0.0) {
        (false, _) => "",
        (true, true) => " during the idle calibration: the command was never started",
        (true, false) => " before the command started: it was never started",
    };
    let (stop_reason, exit_code, command_ending) = match stop {
        Stop::CommandExited(ending) => {
            setup
                .sampler
                .table
                .set_ending(child_pid, ending, run_end_ns);
            (
                "command exited".to_string(),
                ending.shell_code(),
                Some(ending),
            )
        }
        Stop::TargetsExited => ("every target exited".to_string(), 0, None),
        Stop::Duration => (
            "--duration reached".to_string(),
            if spawned { 124 } else { 0 },
            None,
        ),
        Stop::Requested(request) => (
            match request {
                StopRequest::Quit if TERMINAL_HUNG_UP.load(std::sync::atomic::Ordering::SeqCst) => {
                    "the live view's terminal hung up".to_string()
                }
                StopRequest::Quit => "quit from the live view".to_string(),
                _ => format!("interrupted by {}", request.name()),
            } + never_started,
            if wrap { 128 + request.signal() } else { 0 },
            None,
        ),
    };
    if !never_started.is_empty() {
        config
            .notices
            .tell(Notice::NeverStarted(stop_reason.clone()));
    }
    (stop_reason, exit_code, command_ending)
}

/// The run's energy made final: reads that failed and were never made good are unknown, and
/// sources that lag behind the run (a power meter's log) revise their figures now. Returns
/// the source notes (`selection`'s first), the sources' end-of-run reports, and the error of
/// a source that measured nothing of the run.
fn settle_energy(
    sampler: &mut Sampler,
    selection: &[SourceNote],
    domains: &[DomainSpec],
) -> (
    Vec<SourceNote>,
    energy::Reports,
    Option<sources::SourceError>,
) {
    sampler.books.finish(sampler.recorder.all_mut());
    let mut source_notes = selection.to_vec();
    let (settle_notes, settle_error) = energy::settle(
        &mut sampler.sources,
        sampler.recorder.all_mut(),
        &mut sampler.books,
    );
    source_notes.extend(settle_notes);
    let mut reports = energy::collect(&sampler.sources);
    source_notes.append(&mut reports.notes);
    source_notes.extend(sampler.books.notes(domains));
    (source_notes, reports, settle_error)
}

/// What the kernel side lost since `before` (its counters only grow).
fn losses_since(now: Losses, before: Losses) -> Losses {
    Losses {
        on_cpu_map_full: now.on_cpu_map_full.saturating_sub(before.on_cpu_map_full),
        events_dropped: now.events_dropped.saturating_sub(before.events_dropped),
        targets_map_full: now.targets_map_full.saturating_sub(before.targets_map_full),
        unmatched_switches: now
            .unmatched_switches
            .saturating_sub(before.unmatched_switches),
        marks_failed: now.marks_failed.saturating_sub(before.marks_failed),
        finals_missing: now.finals_missing.saturating_sub(before.finals_missing),
    }
}

/// A fresh identifier for a run: its start time and 64 random bits.
pub fn run_id(started: SystemTime) -> String {
    let nanos = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as u64;
    format!("{:016x}-{:016x}", nanos, crate::output::random_u64())
}

/// After a stop request in wrap mode: forward `signal` (0 = none) and keep measuring while
/// the command shuts down, for up to 3 s or until a second signal.
async fn wind_down(
    child: &mut tokio::process::Child,
    pid: u32,
    signal: i32,
    sampler: &mut Sampler,
    signals: &mut Signals,
    interval: Duration,
) -> Option<Ending> {
    if signal != 0 {
        command::send_signal(pid, signal);
    }
    let give_up = tokio::time::sleep(Duration::from_secs(3));
    tokio::pin!(give_up);
    let mut tick = ticker::Ticker::new(interval);
    loop {
        tokio::select! {
            status = child.wait() => return status.ok().map(ending_of),
            _ = tick.tick() => sampler.sample(Phase::Run),
            _ = &mut give_up => return None,
            _ = signals.recv() => return None,
        }
    }
}

async fn wait_child(child: Option<&mut tokio::process::Child>) -> Ending {
    match child {
        Some(child) => match child.wait().await {
            Ok(status) => ending_of(status),
            Err(_) => Ending::Exited(1),
        },
        None => std::future::pending().await,
    }
}

fn ending_of(status: std::process::ExitStatus) -> Ending {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Ending::Exited(code),
        (None, Some(signal)) => Ending::Signaled(signal),
        _ => Ending::Exited(1),
    }
}

/// Whether stdin is a terminal whose foreground process group is ours (then a Ctrl-C
/// reached the wrapped command too).
fn shares_foreground_terminal() -> bool {
    // SAFETY: plain syscalls on fd 0.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// The first of SIGINT, SIGTERM and SIGHUP since the session's [`Signals`] were set up; 0:
/// none.
static FIRST_STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// How many stop signals have come since the session's [`Signals`] were set up.
static STOP_SIGNALS: AtomicU32 = AtomicU32::new(0);

/// Whether a stop signal has come since this was called: what the work after a run
/// (naming its stacks) gives way to, so that a stop signal then still ends it promptly.
fn signalled_from_now() -> impl Fn() -> bool + 'static {
    let seen = STOP_SIGNALS.load(Ordering::SeqCst);
    move || STOP_SIGNALS.load(Ordering::SeqCst) > seen
}

/// The signals that stop a run, and the live view's stop request: the one way a session
/// learns of them, from the first moment of its start-up to its end. The blocking steps of
/// start-up (loading and attaching the probes, which a signal may interrupt in the kernel)
/// ask [`Signals::received`] between steps; once the run measures, [`Signals::recv`] waits.
/// Both see every signal: a signal is noted once and never forgotten.
struct Signals {
    /// Handlers that note the first stop signal in [`FIRST_STOP_SIGNAL`].
    noted: Vec<signal_hook_registry::SigId>,
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Option<std::sync::Arc<tokio::sync::Notify>>,
}

impl Signals {
    fn new(quit: Option<std::sync::Arc<tokio::sync::Notify>>) -> std::io::Result<Self> {
        FIRST_STOP_SIGNAL.store(0, Ordering::SeqCst);
        STOP_SIGNALS.store(0, Ordering::SeqCst);
        let mut noted = Vec::new();
        for stop in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: the action only stores into an atomic: async-signal-safe.
            let id = unsafe {
                signal_hook_registry::register(stop, move || {
                    STOP_SIGNALS.fetch_add(1, Ordering::SeqCst);
                    let _ = FIRST_STOP_SIGNAL.compare_exchange(
                        0,
                        stop,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                })
            };
            match id {
                Ok(id) => noted.push(id),
                Err(err) => {
                    for id in noted {
                        signal_hook_registry::unregister(id);
                    }
                    return Err(err);
                }
            }
        }
        // (After the handlers above: a signal between the two is noted all the same.)
        Ok(Signals {
            noted,
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit,
        })
    }

    /// The first stop signal received since the session started, without waiting.
    fn received(&self) -> Option<StopRequest> {
        let request = StopRequest::from_signal(FIRST_STOP_SIGNAL.load(Ordering::SeqCst));
        if request == Some(StopRequest::Hangup) {
            leave_a_dead_terminal();
        }
        request
    }

    /// Ends the start-up `during` this step when a stop signal came.
    fn stop_here(&self, during: &'static str) -> Result<(), RunError> {
        match self.received() {
            Some(request) => Err(RunError::Interrupted {
                signal: request.signal(),
                during,
            }),
            None => Ok(()),
        }
    }

    async fn recv(&mut self) -> StopRequest {
        let quit = async {
            match &self.quit {
                Some(quit) => quit.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.interrupt.recv() => StopRequest::Interrupt,
            _ = self.terminate.recv() => StopRequest::Terminate,
            _ = self.hangup.recv() => {
                leave_a_dead_terminal();
                StopRequest::Hangup
            }
            _ = quit => StopRequest::Quit,
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.noted.drain(..) {
            signal_hook_registry::unregister(id);
        }
    }
}

/// Set when [`leave_a_dead_terminal`] found the terminal gone.
static TERMINAL_HUNG_UP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// After a hangup, points standard output and error that went to the dead terminal (or a
/// closed pipe) at `/dev/null`: a write there fails, and Rust's printing panics on failure, which would cost
/// the report the run is about to write.
pub fn leave_a_dead_terminal() {
    // SAFETY: poll on our own descriptors; dup2 of a descriptor we opened onto them.
    unsafe {
        for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLOUT,
                revents: 0,
            };
            // (`isatty` says no once a terminal has hung up.)
            let dead =
                libc::poll(&mut p, 1, 0) > 0 && p.revents & (libc::POLLHUP | libc::POLLERR) != 0;
            if dead {
                TERMINAL_HUNG_UP.store(true, std::sync::atomic::Ordering::SeqCst);
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if null >= 0 {
                    libc::dup2(null, fd);
                    libc::close(null);
                }
            }
        }
    }
}

impl ProfilerCost {
    /// Raises the peak memory to this process's peak so far: called once the report is
    /// built, so that `max_rss_bytes` includes building it (a report of many processes can
    /// cost more than the run that measured them).
    pub fn include_peak_so_far(&mut self) {
        self.max_rss_bytes = self.max_rss_bytes.max(own_cost().max_rss_bytes);
    }
}

/// The agent's own CPU time and peak memory so far.
fn own_cost() -> ProfilerCost {
    // SAFETY: getrusage writes into the struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    ProfilerCost {
        cpu_time_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        max_rss_bytes: own_peak_rss_bytes(),
        attach_ms: 0.0,
    }
}

/// This process's own peak resident memory: `VmHWM` of `/proc/self/status`, 0 when it cannot
/// be read. Not `ru_maxrss`, which keeps the peak of the address space exec replaced: started
/// by vfork (Python's subprocess), that is the launching parent's.
fn own_peak_rss_bytes() -> u64 {
    own_status_bytes("VmHWM:")
}

/// Field `field` (`VmHWM:`, `VmRSS:`) of this process's `/proc/self/status`, in bytes; 0 when
/// it cannot be read.
fn own_status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| status_bytes(&status, field))
        .unwrap_or(0)
}

/// A `VmHWM:   1234 kB` line (field `field`) of a `/proc/PID/status`, in bytes.
fn status_bytes(status: &str, field: &str) -> Option<u64> {
    let value = status.lines().find_map(|l| l.strip_prefix(field))?;
    let kib: u64 = value.trim().strip_suffix("kB")?.trim_end().parse().ok()?;
    kib.checked_mul(1024)
}

/// Calibrations shorter than this say nothing about a counter that did not move.
const STILL_MIN_CALIBRATION_NS: u64 = 50_000_000;

/// The first RAPL source (perf, powercap) none of whose counters moved during the idle
/// calibration, and the error saying so: an idle machine still draws watts, so a live RAPL
/// counter advances (uncore, an integrated GPU, may not, and is left out). `sources` are
/// (name, domain count) in order, `domains` their domains as the calibration's intervals
/// index them. Not beside a meter.
fn still_during_calibration(
    sources: &[(&'static str, usize)],
    domains: &[DomainSpec],
    calibration: &[Interval],
) -> Option<(usize, sources::SourceError)> {
    let calibration_ns: u64 = calibration.iter().map(|i| i.duration_ns).sum();
    // Beside a meter, RAPL only shows where the wall's energy went: it stays as it is.
    let meter = sources.iter().any(|&(name, _)| name == "meter");
    if calibration_ns < STILL_MIN_CALIBRATION_NS || meter {
        return None;
    }
    let mut first = 0;
    for (index, &(name, width)) in sources.iter().enumerate() {
        let range = first..first + width;
        first = range.end;
        if !matches!(name, "perf" | "powercap") {
            continue;
        }
        let watched: Vec<usize> = range
            .filter(|&d| domains.get(d).is_some_and(|d| d.kind != DomainKind::Uncore))
            .collect();
        let moved = |d: usize| {
            calibration.iter().any(|i| {
                i.energy_j.get(d).is_some_and(|&j| j > 0.0)
                    || i.energy_state(d).glitches().any(Glitch::shows_movement)
            })
        };
        if watched.is_empty() || watched.iter().any(|&d| moved(d)) {
            continue;
        }
        let names: Vec<&str> = watched.iter().map(|&d| domains[d].name.as_str()).collect();
        return Some((
            index,
            sources::SourceError::NotAdvancing {
                name,
                domains: names.join(", "),
                when: format!(
                    "during the {} idle calibration",
                    sources::human_duration(calibration_ns)
                ),
            },
        ));
    }
    None
}

/// The probes of a run after a fallback: `fallback`'s entries take the place of those of the
/// same names.
fn replace_probes(probes: &mut Vec<SourceProbe>, fallback: Vec<SourceProbe>) {
    let replaced = |p: &SourceProbe| fallback.iter().any(|q| q.name == p.name);
    let at = probes.iter().position(replaced).unwrap_or(probes.len());
    probes.retain(|p| !replaced(p));
    let at = at.min(probes.len());
    probes.splice(at..at, fallback);
}

fn busy_slopes(sources: &[Box<dyn EnergySource>]) -> Vec<Option<f64>> {
    sources
        .iter()
        .flat_map(|s| {
            let slopes = s.busy_slope_w();
            (0..s.domains().len()).map(move |d| slopes.as_ref().and_then(|v| v.get(d).copied()))
        })
        .collect()
}

fn known_idle(sources: &[Box<dyn EnergySource>]) -> Vec<Option<f64>> {
    sources
        .iter()
        .flat_map(|s| {
            let known = s.known_idle_w();
            (0..s.domains().len()).map(move |d| known.as_ref().and_then(|k| k.get(d).copied()))
        })
        .collect()
}

fn validate_idle_watts(idle: &IdleWatts, domains: &[DomainSpec]) -> Result<(), RunError> {
    let names = || {
        domains
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match idle {
        IdleWatts::Estimate => Ok(()),
        IdleWatts::Total(_) => {
            let top = domains.iter().filter(|d| d.parent.is_none()).count();
            if top == 1 {
                Ok(())
            } else {
                Err(RunError::Usage(format!(
                    "--idle-watts with a single figure needs exactly one top-level domain; this \
                     run has {top}: name them, e.g. --idle-watts DOMAIN=W,... (domains: {})",
                    names()
                )))
            }
        }
        IdleWatts::PerDomain(map) => {
            match map.keys().find(|k| !domains.iter().any(|d| &d.name == *k)) {
                Some(unknown) => Err(RunError::Usage(format!(
                    "--idle-watts: no domain {unknown:?} in this run (domains: {})",
                    names()
                ))),
                None => Ok(()),
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The first read: sets the starting point, records nothing.
    Prime,
    /// Before the command starts: used for the idle fit only.
    Calibration,
    /// Between two runs of a set: recorded nowhere.
    Gap,
    Run,
}

/// Reads probes and sources once per interval and records the result.
struct Sampler {
    probes: Probes,
    tracker: ActivityTracker,
    table: ProcessTable,
    sources: Vec<Box<dyn EnergySource>>,
    recorder: Recorder,
    /// Energy that is not known or arrives late, per domain (see [`energy::Books`]).
    books: energy::Books,
    /// Cleanup owed after the next snapshot (see [`Sampler::sample`]).
    pending: Cleanup,
    run_start_ns: u64,
    /// Wall-clock time of the probes' monotonic timestamps.
    wall: energy::WallClock,
    source_errors: BTreeMap<String, u64>,
    last_gc: Instant,
    /// Lifecycle events drained from the kernel's ring buffer between intervals.
    events: Vec<crate::probes::Lifecycle>,
    /// The live view's observer, if one watches this run.
    observer: Option<live::Observer>,
    /// Function-level profiling, when asked for.
    functions: Option<functions::FunctionSession>,
}

/// At the end of a run, at most this many extra intervals of [`DRAIN_INTERVAL`] give the
/// CPU time still carried (read, but more than the last intervals could hold) its room.
const DRAIN_INTERVALS: usize = 5;
const DRAIN_INTERVAL: Duration = Duration::from_millis(20);
/// At most this many while final runtimes are awaited (iterator accounting; a little more
/// than `probes::iterator::FINAL_WAIT_NS`, in case reads fail).
const DRAIN_INTERVALS_MAX: usize = 55;

/// How often lifecycle events are taken from the kernel's ring buffer, at least.
const EVENT_DRAIN_PERIOD: Duration = Duration::from_millis(100);

/// How often to look for kernel entries of threads whose exit event was lost.
const GC_PERIOD: Duration = Duration::from_secs(10);

impl Sampler {
    /// A sampler whose run starts now: books empty, the process table set for the run
    /// (forgetting retired processes under bounded memory, noting changes for an observer,
    /// following attach mode's pids).
    fn new(
        config: &RunConfig,
        probes: Probes,
        sources: Vec<Box<dyn EnergySource>>,
        domain_count: usize,
        observer: Option<live::Observer>,
        functions: Option<functions::FunctionSession>,
    ) -> Self {
        let run_start_ns = monotonic_ns();
        let mut sampler = Sampler {
            wall: energy::WallClock::new(run_start_ns),
            probes,
            tracker: ActivityTracker::new(),
            table: ProcessTable::new(config.mode == Mode::System, &config.proc_root),
            sources,
            recorder: Recorder::for_run(config.bounded_memory),
            books: energy::Books::new(domain_count),
            pending: Cleanup::default(),
            run_start_ns,
            source_errors: BTreeMap::new(),
            last_gc: Instant::now(),
            events: Vec::new(),
            observer,
            functions,
        };
        if config.bounded_memory {
            sampler.table.forget_retired();
        }
        if sampler.observer.is_some() {
            sampler.table.track_changes();
            if let Some(functions) = sampler.functions.as_mut() {
                functions.name_as_we_go();
            }
        }
        if let Mode::Attach { pids } = &config.mode {
            for &pid in pids {
                sampler.table.add_root(pid, sampler.run_start_ns);
            }
        }
        sampler
    }

    /// Hands over the run's intervals and starts the next run's books: its recorder holds the
    /// same calibration, its energy accounts start empty.
    fn next_run(&mut self) -> Recorder {
        let mut next = Recorder::for_run(false);
        for interval in self.recorder.calibration() {
            next.push_calibration(interval.clone());
        }
        self.books = energy::Books::new(self.books.domain_count());
        std::mem::replace(&mut self.recorder, next)
    }

    /// Uses `source` (primed) instead of source `index`; the calibration so far, measured
    /// with the other, is dropped, and the energy books start anew.
    fn replace_source(&mut self, index: usize, source: Box<dyn EnergySource>) {
        self.sources[index] = source;
        self.recorder.drop_calibration();
        let domains = self.sources.iter().map(|s| s.domains().len()).sum();
        self.books = energy::Books::new(domains);
    }

    /// Takes the lifecycle events queued in the kernel, to be applied at the next interval.
    fn drain_events(&mut self) {
        self.events.extend(self.probes.drain_events());
    }

    /// Reads the sample ring between intervals (see `Probes::sample_ring_read_period`).
    fn read_sample_ring(&mut self) {
        if let Some(functions) = self.functions.as_mut() {
            functions.read_sample_ring(&mut self.probes);
        }
    }

    /// One interval: events, then the snapshot, then the energy; exited threads are deleted
    /// from the kernel maps one interval after their exit was seen, once their last slice
    /// (the switch-out after the exit event) has been read.
    fn sample(&mut self, phase: Phase) {
        let Some((events, cleanup, snapshot)) = self.events_and_snapshot() else {
            return;
        };
        let table = &self.table;
        let activity = self
            .tracker
            .advance(&snapshot, |thread| table.is_target_thread(thread));
        let run = phase == Phase::Run;
        let interval = activity.as_ref().map(|a| {
            let wall_start_ns = self.wall.wall_ns(a.start_ns);
            accounting::interval_of(&mut self.table, a, self.run_start_ns, wall_start_ns, run)
        });
        if let (Some(f), Some(a)) = (self.functions.as_mut(), activity.as_ref()) {
            let (probes, table) = (&mut self.probes, &mut self.table);
            f.sample(probes, a, table, self.run_start_ns, run, &events);
        }
        self.settle_exits(cleanup, &snapshot);
        let Some(mut interval) = interval else {
            // Prime: start every source's counters here too.
            let now = self.wall.wall_ns(monotonic_ns());
            self.read_sources(&ReadContext {
                duration_ns: 0,
                busy_ns_per_cpu: &[],
                wall_start_ns: now,
                wall_end_ns: now,
            });
            return;
        };
        self.measure_energy(&mut interval, run);
        if run {
            self.tell_observer(&interval);
        }
        match phase {
            Phase::Calibration => self.recorder.push_calibration(interval),
            Phase::Gap => {}
            Phase::Prime | Phase::Run => self.recorder.push(interval),
        }
    }

    /// The lifecycle events since the previous interval applied, what they ask to clean up,
    /// and the probes' snapshot; `None` when the snapshot failed (counted; the cleanup waits).
    fn events_and_snapshot(
        &mut self,
    ) -> Option<(Vec<crate::probes::Lifecycle>, Cleanup, Snapshot)> {
        let mut events = std::mem::take(&mut self.events);
        events.extend(self.probes.drain_events());
        let mut cleanup = self.table.apply(&events);
        let snapshot = match self.probes.snapshot() {
            Ok(s) => s,
            Err(err) => {
                *self
                    .source_errors
                    .entry(format!("probes: {err}"))
                    .or_default() += 1;
                self.pending.threads.extend(cleanup.threads);
                self.pending.processes.extend(cleanup.processes);
                return None;
            }
        };
        // Processes forked while the events above were applied may have run already and
        // be in the snapshot: their fork events are applied now, before the snapshot is
        // attributed. (What these events ask to clean up waits, as for any event, for the
        // snapshot after the next.)
        let late = self.probes.drain_events();
        if !late.is_empty() {
            let late_cleanup = self.table.apply(&late);
            cleanup.threads.extend(late_cleanup.threads);
            cleanup.processes.extend(late_cleanup.processes);
            events.extend(late);
        }
        Some((events, cleanup, snapshot))
    }

    /// Settles the cleanup owed since the previous snapshot ([`accounting::settle_exits`]),
    /// deleting the threads it lets go from the kernel's maps; `cleanup` waits for the next.
    fn settle_exits(&mut self, cleanup: Cleanup, snapshot: &Snapshot) {
        let done = std::mem::replace(&mut self.pending, cleanup);
        let (wait, delete) =
            accounting::settle_exits(done, snapshot, &mut self.tracker, &mut self.table);
        self.pending.threads.extend(wait.threads);
        self.pending.processes.extend(wait.processes);
        for &thread in &delete {
            self.probes.delete_thread(thread);
        }
        if self.last_gc.elapsed() >= GC_PERIOD {
            self.last_gc = Instant::now();
            // Cleaned up like any exit: their last time is read and charged first.
            let lost = self.probes.lost_threads(snapshot);
            self.pending.threads.extend(lost);
        }
    }

    /// The interval's energy from every source, and its GPU use (before the run, GPU use
    /// counts as other, like the CPU time of targets).
    fn measure_energy(&mut self, interval: &mut Interval, run: bool) {
        let busy = interval.busy_ns_per_cpu();
        (interval.energy_j, interval.energy_state) = self.read_sources(&ReadContext {
            duration_ns: interval.duration_ns,
            busy_ns_per_cpu: &busy,
            wall_start_ns: interval.wall_start_ns,
            wall_end_ns: interval.wall_start_ns + interval.duration_ns,
        });
        let now_ns = self.run_start_ns + interval.start_ns + interval.duration_ns;
        interval.gpus = if run {
            energy::gpu_usage(&self.sources, &mut self.table, now_ns)
        } else {
            energy::gpu_usage(
                &self.sources,
                &mut ProcessTable::new(false, "/proc"),
                now_ns,
            )
        };
    }

    /// Hands the run's interval to the live view's observer, if one watches.
    fn tell_observer(&mut self, interval: &Interval) {
        let Some(observer) = self.observer.as_mut() else {
            return;
        };
        let changed = self.table.take_changed();
        observer(LiveEvent::Sample(LiveSample {
            interval,
            processes: self.table.records(),
            changed: &changed,
            losses: self.probes.losses().unwrap_or_default(),
            read_errors_count: self.source_errors.values().sum(),
            functions: self.functions.as_ref().and_then(|f| f.live()),
        }));
    }

    /// Reads every source over `ctx` ([`energy::read_sources`]).
    fn read_sources(&mut self, ctx: &ReadContext<'_>) -> (Vec<f64>, Vec<EnergyState>) {
        energy::read_sources(
            &mut self.sources,
            &mut self.books,
            &mut self.recorder,
            &mut self.source_errors,
            ctx,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compared_commands_take_turns_each_after_its_prepare_step() {
        let run = |command, warmup, number| Step::Run {
            command,
            warmup,
            number,
        };
        let mut plan = RepeatPlan {
            runs: 2,
            warmup: 1,
            cooldown: Duration::ZERO,
            commands: vec![vec!["a".into()], vec!["b".into()]],
            prepare: None,
        };
        // A B | A B | A B: one warm-up round, two measured ones.
        assert_eq!(
            schedule(&plan),
            [
                run(0, true, 1),
                run(1, true, 1),
                run(0, false, 1),
                run(1, false, 1),
                run(0, false, 2),
                run(1, false, 2),
            ]
        );
        plan.prepare = Some(vec!["sync".into()]);
        plan.warmup = 0;
        plan.runs = 1;
        assert_eq!(
            schedule(&plan),
            [
                Step::Prepare,
                run(0, false, 1),
                Step::Prepare,
                run(1, false, 1)
            ]
        );
        // --repeat: the config's own command, N times.
        plan.commands.clear();
        plan.prepare = None;
        plan.runs = 3;
        assert_eq!(
            schedule(&plan),
            [run(0, false, 1), run(0, false, 2), run(0, false, 3)]
        );
    }

    #[test]
    fn a_stop_request_is_the_signal_a_command_gets_and_cg_trace_exits_with() {
        assert_eq!(StopRequest::Interrupt.signal(), libc::SIGINT);
        assert_eq!(StopRequest::Terminate.signal(), libc::SIGTERM);
        assert_eq!(StopRequest::Hangup.signal(), libc::SIGHUP);
        // The live view's quit is the Ctrl-C its raw terminal did not send.
        assert_eq!(StopRequest::Quit.signal(), libc::SIGINT);
        assert_eq!(StopRequest::Quit.name(), "SIGINT");
        assert_eq!(StopRequest::Terminate.name(), "SIGTERM");
    }

    #[test]
    fn a_stop_signal_of_the_start_up_is_noted_at_once_kept_and_seen_by_the_run() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut signals = Signals::new(None).unwrap();
            assert_eq!(signals.received(), None);
            // SAFETY: raising signals that the handlers just installed catch.
            unsafe { libc::raise(libc::SIGTERM) };
            assert_eq!(signals.received(), Some(StopRequest::Terminate));
            // SAFETY: as above.
            unsafe { libc::raise(libc::SIGINT) };
            // The first one is the run's: asking again (between steps) never forgets it.
            assert_eq!(signals.received(), Some(StopRequest::Terminate));
            assert_eq!(signals.received(), Some(StopRequest::Terminate));
            // The measuring side waits for the same signals.
            let seen = signals.recv().await;
            assert!(
                matches!(seen, StopRequest::Terminate | StopRequest::Interrupt),
                "{seen:?}"
            );
            assert!(matches!(
                signals.stop_here("loading"),
                Err(RunError::Interrupted {
                    signal: libc::SIGTERM,
                    during: "loading"
                })
            ));
            assert_eq!(
                signals.stop_here("loading").unwrap_err().exit_code(),
                128 + libc::SIGTERM
            );
            drop(signals);
            let again = Signals::new(None).unwrap();
            assert_eq!(again.received(), None, "a new session starts clean");
        });
    }

    #[test]
    fn each_run_of_a_set_counts_its_own_kernel_losses() {
        let before = Losses {
            on_cpu_map_full: 1,
            events_dropped: 2,
            targets_map_full: 3,
            unmatched_switches: 4,
            marks_failed: 5,
            finals_missing: 6,
        };
        let now = Losses {
            on_cpu_map_full: 1,
            events_dropped: 7,
            targets_map_full: 3,
            unmatched_switches: 14,
            marks_failed: 5,
            finals_missing: 8,
        };
        let run = losses_since(now, before);
        assert_eq!(run.events_dropped, 5);
        assert_eq!(run.unmatched_switches, 10);
        assert_eq!(run.finals_missing, 2);
        assert_eq!(run.total(), 17);
        // Counters that went back (a map recreated) give 0, not a wrapped figure.
        assert_eq!(losses_since(before, now).total(), 0);
    }

    #[test]
    fn the_peak_memory_includes_what_was_used_after_the_run() {
        let mut cost = own_cost();
        // What is resident now (the peak so far may be higher: other tests run beside).
        let before = own_status_bytes("VmRSS:");
        // 256 MiB touched after the run's figures were taken (as building a report can).
        let big = vec![1u8; 256 << 20];
        std::hint::black_box(&big);
        drop(big);
        cost.include_peak_so_far();
        assert!(
            cost.max_rss_bytes >= before + (200 << 20),
            "{before} -> {}",
            cost.max_rss_bytes
        );
    }

    #[test]
    fn the_peak_memory_is_read_from_vm_hwm() {
        let status = "Name:\tcg-trace\nVmPeak:\t  900000 kB\nVmHWM:\t   54272 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(status_bytes(status, "VmHWM:"), Some(54272 * 1024));
        assert_eq!(status_bytes(status, "VmRSS:"), Some(1024));
        assert_eq!(status_bytes("VmRSS:\t 1 kB\n", "VmHWM:"), None);
        assert_eq!(status_bytes("VmHWM:\t lots kB\n", "VmHWM:"), None);
        assert!(own_peak_rss_bytes() > 0);
    }

    #[test]
    fn the_header_says_estimated_as_soon_as_one_source_is() {
        let source = |provenance| SourceInfo {
            name: "x",
            provenance,
            description: String::new(),
            domains: Vec::new(),
        };
        let mut header = RunHeader {
            mode: Mode::System,
            host: HostInfo {
                hostname: "h".into(),
                kernel: "k".into(),
                cpu_model: "c".into(),
                cpu_packages: vec![0],
            },
            sources: vec![source(Provenance::Measured)],
            selection_reason: String::new(),
            baseline: BaselineInputs {
                domains: Vec::new(),
                idle_watts: IdleWatts::Estimate,
                known_idle_w: Vec::new(),
                rest_power: Vec::new(),
                busy_slope_w: Vec::new(),
                interval: Duration::from_millis(100),
                prior_slope_w_per_cpu: 1.0,
            },
        };
        assert_eq!(header.provenance(), Provenance::Measured);
        header.sources.push(source(Provenance::Estimated));
        assert_eq!(header.provenance(), Provenance::Estimated);
    }

    fn domain(name: &str, kind: DomainKind, source: &'static str) -> DomainSpec {
        DomainSpec {
            name: name.into(),
            kind,
            parent: None,
            coverage: crate::attribution::Coverage::AllCpus,
            provenance: Provenance::Measured,
            source,
        }
    }

    /// `count` calibration intervals of 100 ms with these joules per domain.
    fn calibration(count: usize, joules: &[f64]) -> Vec<Interval> {
        let interval = Interval {
            duration_ns: 100_000_000,
            energy_j: joules.to_vec(),
            ..Interval::default()
        };
        vec![interval; count]
    }

    #[test]
    fn a_rapl_source_none_of_whose_counters_moved_at_calibration_is_still() {
        // perf: package-0 (uncore-0 inside), then a GPU.
        //
        //   interval   0     1     2     3     4
        //   package-0  0 J   0 J   0 J   0 J   0 J      still
        //   uncore-0   0 J   0 J   0 J   0 J   0 J      (idle GPU: not watched)
        //   gpu0       7 J   7 J   7 J   7 J   7 J
        let sources = [("perf", 2), ("nvml", 1)];
        let domains = [
            domain("package-0", DomainKind::Package, "perf"),
            domain("uncore-0", DomainKind::Uncore, "perf"),
            domain("gpu0", DomainKind::Gpu, "nvml"),
        ];
        let still = calibration(5, &[0.0, 0.0, 7.0]);
        let (index, err) = still_during_calibration(&sources, &domains, &still).unwrap();
        assert_eq!(index, 0);
        assert_eq!(
            err.to_string(),
            "perf counters present, not advancing: package-0 did not move during the 500 ms \
             idle calibration (a VM or firmware that lists RAPL counters without feeding them)"
        );
        // One joule once is a counter that moves.
        let mut moving = still.clone();
        moving[3].energy_j[0] = 1.0;
        assert!(still_during_calibration(&sources, &domains, &moving).is_none());
        // A counter that jumped moved too; one found frozen did not.
        let mut frozen = still.clone();
        frozen[4].energy_state = vec![EnergyState::unknown(100_000_000, Glitch::Frozen)];
        assert!(still_during_calibration(&sources, &domains, &frozen).is_some());
        frozen[4].energy_state = vec![EnergyState::unknown(100_000_000, Glitch::Jump)];
        assert!(still_during_calibration(&sources, &domains, &frozen).is_none());
        // Too short a calibration, or a meter beside: nothing is said.
        assert!(still_during_calibration(&sources, &domains, &still[..0]).is_none());
        let with_meter = [("perf", 2), ("meter", 1)];
        assert!(still_during_calibration(&with_meter, &domains, &still).is_none());
    }

    #[test]
    fn a_fallback_takes_the_place_of_the_probes_it_replaces() {
        let probe = |name, usable| SourceProbe {
            name,
            provenance: Provenance::Measured,
            domains: Vec::new(),
            status: if usable {
                sources::ProbeStatus::Usable
            } else {
                sources::ProbeStatus::NotAdvancing
            },
            usable,
            needs_privileges: false,
            reason: String::new(),
        };
        let mut probes = vec![
            probe("perf", true),
            probe("powercap", true),
            probe("nvml", true),
        ];
        replace_probes(
            &mut probes,
            vec![
                probe("perf", false),
                probe("powercap", false),
                probe("model", true),
            ],
        );
        let got: Vec<_> = probes.iter().map(|p| (p.name, p.usable)).collect();
        assert_eq!(
            got,
            [
                ("perf", false),
                ("powercap", false),
                ("model", true),
                ("nvml", true)
            ]
        );
    }
}
