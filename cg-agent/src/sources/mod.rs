//! Energy sources: each reads one kind of energy counter (or estimates one) and yields the
//! joules each of its domains used since the previous read. Every source takes its root path,
//! opener or library path as a constructor argument, so tests run the real reading code on
//! generated trees, pipes and stand-in libraries; counter wraparound and the plausibility of
//! every reading are handled once, in [`counter`]. A read yields a [`Reading`] per domain:
//! joules, energy that a later read will bring (the read failed), or energy that is not known
//! (the counter glitched). [`select`] decides which sources a run uses and why.
//!
//! | source | module | domains | provenance |
//! |---|---|---|---|
//! | RAPL through the perf `power` PMU | [`perf`] | package-N, core-N, uncore-N, dram-N, psys | measured |
//! | RAPL through powercap | [`powercap`] | the same | measured |
//! | NVIDIA GPUs through NVML | [`gpu`], [`nvml`] | gpuN | measured (energy derived from power where no counter) |
//! | an external power meter's log | [`meter`] | meter (the whole machine) | measured |
//! | the built-in model | [`model`] | model | estimated |

pub mod counter;
pub mod gpu;
pub mod gpu_rest;
pub mod meter;
pub mod model;
pub mod nvml;
pub mod perf;
pub mod powercap;
pub mod select;

use std::path::PathBuf;

use serde::Serialize;

use crate::attribution::{Coverage, Glitch};

/// Whether a figure was measured by hardware or estimated by a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provenance {
    Measured,
    Estimated,
}

impl Provenance {
    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::Measured => "measured",
            Provenance::Estimated => "estimated",
        }
    }

    /// What a figure drawn from several sources is: estimated as soon as one of them is.
    pub fn of_all(provenances: impl IntoIterator<Item = Provenance>) -> Provenance {
        if provenances.into_iter().any(|p| p == Provenance::Estimated) {
            Provenance::Estimated
        } else {
            Provenance::Measured
        }
    }
}

/// What part of the machine a domain measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DomainKind {
    /// A CPU package (socket): cores, caches, uncore.
    Package,
    /// The cores of a package (inside the package).
    Core,
    /// The uncore of a package, e.g. an integrated GPU (inside the package).
    Uncore,
    /// Memory attached to a package (not inside the package).
    Dram,
    /// The whole platform (SoC), covering packages and DRAM.
    Psys,
    /// The built-in power model.
    Model,
    /// An NVIDIA GPU (the whole board).
    Gpu,
    /// An external power meter: the whole machine at the wall.
    Meter,
}

/// One energy domain as a source offers it.
#[derive(Clone, Debug, PartialEq)]
pub struct DomainSpec {
    /// Unique name: `package-0`, `core-0`, `dram-0`, `psys`, `model`, ...
    pub name: String,
    pub kind: DomainKind,
    /// The domain whose energy already includes this one's (`core-0` in `package-0`); totals
    /// only add up domains without a parent, so nothing is counted twice.
    pub parent: Option<String>,
    /// The CPUs whose activity this domain's energy is split over.
    pub coverage: Coverage,
    pub provenance: Provenance,
    /// Name of the source that reads it.
    pub source: &'static str,
}

/// What a source may use to produce an interval's figures (the model needs activity, a power
/// meter's log the wall-clock bounds).
#[derive(Clone, Copy, Debug)]
pub struct ReadContext<'a> {
    pub duration_ns: u64,
    /// Non-idle nanoseconds per CPU id during the interval.
    pub busy_ns_per_cpu: &'a [u64],
    /// Wall-clock bounds of the interval, nanoseconds since the Unix epoch.
    pub wall_start_ns: u64,
    pub wall_end_ns: u64,
}

/// A stretch of wall-clock time, nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallSpan {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// How busy one GPU was since the previous read and which processes (pids) used it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuActivity {
    /// Fraction of the time the GPU was busy, 0 to 1.
    pub busy_fraction: f64,
    /// (pid, fraction of the time the GPU was busy for it).
    pub processes: Vec<(u32, f64)>,
    /// The GPU's own figures at its last poll.
    pub telemetry: crate::attribution::gpu::GpuTelemetry,
}

/// A remark on how well a source measured, for the report's quality notes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceNote {
    /// Whether it makes the measurement `degraded` (something was lost or approximated).
    pub degraded: bool,
    pub text: String,
}

impl SourceNote {
    pub fn info(text: impl Into<String>) -> Self {
        SourceNote {
            degraded: false,
            text: text.into(),
        }
    }

    pub fn degraded(text: impl Into<String>) -> Self {
        SourceNote {
            degraded: true,
            text: text.into(),
        }
    }
}

/// What a source has to say at the end of a run, beyond energy.
#[derive(Clone, Debug, Default)]
pub struct SourceSummary {
    pub notes: Vec<SourceNote>,
    /// Per GPU: identity, telemetry, which figures were measured and which derived.
    pub gpus: Vec<gpu::GpuSummary>,
    /// The power meter's log: what it held and where it had gaps.
    pub meter: Option<meter::MeterSummary>,
}

/// One domain's energy since the previous read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reading {
    /// Joules (measured or estimated, as the source is).
    Joules(f64),
    /// The read failed; a cumulative counter keeps its last value, so this energy shows up in
    /// a later reading, which the session spreads over the intervals it covers.
    Pending,
    /// Not known: the counter did something hardware does not do (see [`Glitch`]).
    Unknown(Unknown),
}

/// Energy that is not known, and which reads it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unknown {
    pub glitch: Glitch,
    /// Reads just before this one, each reported as 0 J at the time, that the same glitch
    /// covers (a counter is found frozen only after a few intervals), and their total length.
    pub earlier_count: u32,
    pub earlier_ns: u64,
}

impl Reading {
    /// This interval's energy is unknown because of `glitch`.
    pub fn unknown(glitch: Glitch) -> Self {
        Reading::Unknown(Unknown {
            glitch,
            earlier_count: 0,
            earlier_ns: 0,
        })
    }

    /// The joules, when known.
    pub fn joules(&self) -> Option<f64> {
        match self {
            Reading::Joules(j) => Some(*j),
            _ => None,
        }
    }
}

/// CPUs busy on average during the interval among those `coverage` names.
pub fn busy_cpus(ctx: &ReadContext<'_>, coverage: &Coverage) -> f64 {
    if ctx.duration_ns == 0 {
        return 0.0;
    }
    let busy_ns: u64 = ctx
        .busy_ns_per_cpu
        .iter()
        .enumerate()
        .filter(|(cpu, _)| coverage.covers(*cpu as u32))
        .map(|(_, ns)| ns)
        .sum();
    busy_ns as f64 / ctx.duration_ns as f64
}

/// A duration in the units a person reads: `350 ms`, `4.2 s`, `2 min 5 s`, `1 h 3 min`.
pub fn human_duration(ns: u64) -> String {
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;
    match ns {
        0 => "0 s".into(),
        n if n < MS => format!("{} µs", n.div_ceil(1_000)),
        n if n < 10 * S => {
            let ms = (n + MS / 2) / MS;
            if ms < 1_000 {
                format!("{ms} ms")
            } else {
                format!("{:.1} s", ms as f64 / 1e3)
            }
        }
        n if n < 60 * S => format!("{} s", (n + S / 2) / S),
        n if n < 3_600 * S => {
            let s = (n + S / 2) / S;
            format!("{} min {} s", s / 60, s % 60)
        }
        n => {
            let min = (n + 30 * S) / (60 * S);
            format!("{} h {} min", min / 60, min % 60)
        }
    }
}

/// A reader of energy counters.
pub trait EnergySource {
    /// Short name used in reports: `powercap`, `model`, ...
    fn name(&self) -> &'static str;
    fn provenance(&self) -> Provenance;
    /// The domains, in the order [`EnergySource::read`] returns them.
    fn domains(&self) -> &[DomainSpec];
    /// Energy per domain since the previous call (since the source was opened, for the
    /// first); a call with `ctx.duration_ns == 0` only sets the starting point. An error means
    /// nothing was read (no counter moved its origin).
    fn read(&mut self, ctx: &ReadContext<'_>) -> Result<Vec<Reading>, SourceError>;
    /// Whether the energy of a failed [`EnergySource::read`] shows up in a later one (a
    /// cumulative counter), or is lost (a power log, which [`EnergySource::settle`] revises).
    fn failed_read_carries_over(&self) -> bool {
        true
    }
    /// One line on what this source is reading and how (shown in the report and summary).
    fn describe(&self) -> String;
    /// Idle power per domain when the source knows it exactly (a model does); measured
    /// sources leave it to the estimator in [`crate::attribution::idle`].
    fn known_idle_w(&self) -> Option<Vec<f64>> {
        None
    }
    /// For a source whose figures follow from CPU activity (the model): per domain, the
    /// joules it adds for each nanosecond more of busy CPU time, so that time placed in an
    /// interval after it was read (see `Recorder::place_late`) changes its estimate as a
    /// read would have. `None` for measured sources: their joules are what they are.
    fn joules_per_busy_ns(&self) -> Option<Vec<f64>> {
        None
    }
    /// Per domain, the watts one fully busy unit (a GPU) is assumed to add when the idle
    /// baseline cannot be fitted; `None` uses the CPU prior.
    fn busy_slope_w(&self) -> Option<Vec<f64>> {
        None
    }
    /// For GPU sources, per domain: the GPU's rest power, its idle baseline (see
    /// [`gpu_rest`]); `None` where it is not known.
    fn rest_power(&self) -> Option<Vec<Option<gpu_rest::RestPower>>> {
        None
    }
    /// For GPU sources: per GPU number ([`crate::attribution::Coverage::Gpu`]), its use since
    /// the previous [`EnergySource::read`].
    fn gpu_activity(&self) -> Vec<GpuActivity> {
        Vec::new()
    }
    /// Once the run is over: the energy per domain of each span, recomputed from data that
    /// arrived after the live reads (a power meter's log lags behind the run). `None`: the
    /// live reads stand.
    fn settle(&mut self, _spans: &[WallSpan]) -> Option<Result<Vec<Vec<f64>>, SourceError>> {
        None
    }
    /// Notes and details for the report, at the end of the run.
    fn summary(&self) -> SourceSummary {
        SourceSummary::default()
    }
}

/// Errors of energy sources.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("no RAPL zones under {root} (this machine or VM exposes no powercap energy counters)")]
    PowercapMissing { root: PathBuf },
    #[error(
        "{path} is not readable: {reason}; energy_uj is readable only by root on kernels with the \
         PLATYPUS fix (5.10+), so run cg-trace as root"
    )]
    PowercapUnreadable {
        path: PathBuf,
        reason: String,
        /// The kernel refused us (root would be allowed).
        denied: bool,
    },
    #[error("malformed powercap tree: {path}: {reason}")]
    PowercapMalformed { path: PathBuf, reason: String },
    #[error(
        "no RAPL perf PMU under {root} (no `power` or `power_core` event source: this machine or \
         VM exposes no RAPL perf events)"
    )]
    PerfMissing { root: PathBuf },
    #[error("malformed perf event source: {path}: {reason}")]
    PerfMalformed { path: PathBuf, reason: String },
    #[error(
        "opening the perf counter {what} was refused: {reason}; system-wide perf counters need \
         root or CAP_PERFMON (or kernel.perf_event_paranoid <= 0)"
    )]
    PerfDenied { what: String, reason: String },
    #[error("perf counter {what}: {reason}")]
    PerfFailed { what: String, reason: String },
    #[error("NVML is not usable ({lib}): {reason}")]
    NvmlUnavailable {
        lib: PathBuf,
        reason: String,
        /// The library itself could not be loaded (no NVIDIA driver installed).
        missing: bool,
    },
    #[error("NVML ({lib}) reports no GPU")]
    NvmlNoDevice { lib: PathBuf },
    #[error("GPU {gpu}: {reason}")]
    Gpu { gpu: String, reason: String },
    #[error("power log {path}{}: {reason}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    PowerLog {
        path: PathBuf,
        /// 1-based line number, when a line is at fault.
        line: Option<usize>,
        reason: String,
    },
    #[error(
        "{name} counters present, not advancing: {domains} did not move {when} (a VM or \
         firmware that lists RAPL counters without feeding them)"
    )]
    NotAdvancing {
        name: &'static str,
        /// The domains checked, `psys` or `package-0, dram-0`.
        domains: String,
        /// Over what: `in 100 ms with a CPU kept busy`, `during the 500 ms idle calibration`.
        when: String,
    },
    #[error("invalid power model: {0}")]
    InvalidModel(String),
    /// Options that cannot be used together.
    #[error("{0}")]
    Conflict(String),
}

impl SourceError {
    /// Whether the source exists but the kernel refused us: root (or CAP_PERFMON) would help.
    pub fn needs_privileges(&self) -> bool {
        matches!(
            self,
            SourceError::PowercapUnreadable { denied: true, .. } | SourceError::PerfDenied { .. }
        )
    }
}

/// The user's choice of source (`--source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceChoice {
    /// The best measured source available (perf, then powercap), else the model.
    Auto,
    /// RAPL through the perf `power` PMU.
    Perf,
    /// RAPL through the powercap sysfs interface.
    Powercap,
    /// The built-in power model (estimated).
    Model,
}

/// Options that decide and configure sources.
#[derive(Clone, Debug)]
pub struct SourceOptions {
    pub choice: SourceChoice,
    pub powercap_root: PathBuf,
    /// Where the perf event sources (`power`, `power_core`) are listed.
    pub perf_root: PathBuf,
    /// Read perf counters from files under this directory instead of opening perf events
    /// (end-to-end tests and benchmarks; see [`perf::FileOpener`]).
    pub perf_counters_from: Option<PathBuf>,
    /// `--model-watts IDLE:MAX` (whole machine).
    pub model_watts: Option<(f64, f64)>,
    /// The NVML library to load; `None` when GPUs are not to be measured (`--no-gpu`).
    pub nvml_lib: Option<PathBuf>,
    /// The library was named (`--nvml-lib`): failing to use it is an error, not an absence.
    pub nvml_required: bool,
    /// `--power-log FILE`: a power meter's log, the energy truth for the whole machine.
    pub power_log: Option<PathBuf>,
    /// Where what is learnt about the machine between runs is kept (a GPU's rest power, see
    /// [`gpu_rest`]); `None`: nothing is kept.
    pub state_dir: Option<PathBuf>,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            choice: SourceChoice::Auto,
            powercap_root: PathBuf::from(powercap::DEFAULT_ROOT),
            perf_root: PathBuf::from(perf::DEFAULT_ROOT),
            perf_counters_from: None,
            model_watts: None,
            nvml_lib: Some(PathBuf::from(nvml::DEFAULT_LIB)),
            nvml_required: false,
            power_log: None,
            state_dir: gpu_rest::default_state_dir(),
        }
    }
}

/// A domain as a probe found it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeDomain {
    pub name: String,
    pub kind: DomainKind,
    pub parent: Option<String>,
}

impl From<&DomainSpec> for ProbeDomain {
    fn from(d: &DomainSpec) -> Self {
        ProbeDomain {
            name: d.name.clone(),
            kind: d.kind,
            parent: d.parent.clone(),
        }
    }
}

/// Where a probed source stands: `cg-trace sources`' STATUS column, `status` in its JSON and
/// in the report's `sources_probed[]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// It can be read (and its counters advance, for RAPL).
    Usable,
    /// It exists, but reading it needs privileges this process lacks (root would do).
    NeedsPrivileges,
    /// Its counters open and read, but did not move: not a measurement.
    NotAdvancing,
    /// Not on this machine, or not readable for another reason (the reason says which).
    NotAvailable,
}

impl ProbeStatus {
    /// The words of the STATUS column.
    pub fn describe(self) -> &'static str {
        match self {
            ProbeStatus::Usable => "usable",
            ProbeStatus::NeedsPrivileges => "needs privileges",
            ProbeStatus::NotAdvancing => "present, not advancing",
            ProbeStatus::NotAvailable => "not available",
        }
    }

    /// The status of a source that could not be used because of `err`.
    pub fn of_error(err: &SourceError) -> Self {
        match err {
            SourceError::NotAdvancing { .. } => ProbeStatus::NotAdvancing,
            err if err.needs_privileges() => ProbeStatus::NeedsPrivileges,
            _ => ProbeStatus::NotAvailable,
        }
    }
}

/// What probing one candidate source found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceProbe {
    pub name: &'static str,
    pub provenance: Provenance,
    /// The domains it offers (also when it cannot be read, where discovery got that far).
    pub domains: Vec<ProbeDomain>,
    pub status: ProbeStatus,
    pub usable: bool,
    /// It exists, but reading it needs privileges this process lacks (root would do).
    pub needs_privileges: bool,
    /// Why it is or is not usable.
    pub reason: String,
}

/// The sources chosen for a run, why, and what else was probed.
pub struct Selection {
    pub sources: Vec<Box<dyn EnergySource>>,
    pub reason: String,
    pub probes: Vec<SourceProbe>,
    /// Warnings from choosing (perf and powercap disagreeing on the domains, NVML failing).
    pub notes: Vec<SourceNote>,
}

pub use select::{probe_all, select};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        const MS: u64 = 1_000_000;
        assert_eq!(human_duration(0), "0 s");
        assert_eq!(human_duration(1_500), "2 µs");
        assert_eq!(human_duration(350 * MS), "350 ms");
        assert_eq!(human_duration(4_240 * MS), "4.2 s");
        assert_eq!(human_duration(42_400 * MS), "42 s");
        assert_eq!(human_duration(125_000 * MS), "2 min 5 s");
        assert_eq!(human_duration(3_780_000 * MS), "1 h 3 min");
    }

    #[test]
    fn busy_cpus_counts_only_the_covered_ones() {
        let busy = [50, 100, 25];
        let ctx = ReadContext {
            duration_ns: 100,
            busy_ns_per_cpu: &busy,
            wall_start_ns: 0,
            wall_end_ns: 100,
        };
        assert!((busy_cpus(&ctx, &Coverage::AllCpus) - 1.75).abs() < 1e-12);
        assert!((busy_cpus(&ctx, &Coverage::Cpus(vec![1, 2])) - 1.25).abs() < 1e-12);
        assert_eq!(busy_cpus(&ctx, &Coverage::Gpu(0)), 0.0);
    }
}
