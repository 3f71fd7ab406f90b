//! NVIDIA GPUs as an energy source: one domain `gpuN` per GPU (the whole board), its energy
//! from NVML's total-energy counter (mJ, Volta and newer) or, where the GPU has none, from
//! integrating its power readings (then the energy is **derived**, and the report says so).
//! Each read also yields how busy each GPU was and which processes used it, which attribution
//! uses to split the GPU's energy ([`crate::attribution::gpu`]).
//!
//! NVML itself sits behind [`GpuBackend`] ([`super::nvml::NvmlBackend`] in production), so tests
//! drive this logic with scripted readings.
//!
//! How coarse this is: NVML refreshes power and energy every 20-100 ms and samples per-process
//! utilisation about every 1/6 s, so per-process GPU figures are approximate, and intervals
//! shorter than NVML's refresh see energy arrive in lumps (never lost or counted twice).
//! Per-process samples are sparse and coarse: a poll may bring none, and a sampling tick may
//! name only one of the processes sharing the GPU (the recorded H100 once gave a process that
//! used 1 % of it a 98 % sample while the busy one had none). So shares are taken over the
//! samples of the last [`SHARE_WINDOW_US`] by their own timestamps, not over one poll's: a
//! process's share is the sum of its samples there over the most samples any process has
//! there (the sampling periods the window holds), so one stray sample weighs one period of
//! the window, not a whole interval. Between samples, the window's shares stand for the
//! processes still running; with no sample at all, the busy time is shared evenly among the
//! GPU's running processes (noted in the report). Busy time no process accounts for is
//! reported as unexplained.
//!
//! Each poll also tells whether the GPU is at rest; its rest power is its domain's idle
//! baseline ([`super::gpu_rest`]), kept for later runs when the run is over.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    DomainKind, DomainSpec, EnergySource, GpuActivity, Provenance, ReadContext, Reading,
    SourceError, SourceNote, SourceSummary, WallSpan,
    counter::{self, CheckedCounter},
    gpu_rest::{self, RestPower, RestStore, RestTracker},
};
use crate::attribution::{Coverage, Glitch, gpu::GpuTelemetry};

/// Polls are at most this frequent (NVML refreshes every 20-100 ms): shorter intervals see
/// their GPU energy in the next poll.
pub const MIN_POLL_NS: u64 = 10_000_000;
/// Per-process utilisation and process lists are asked for at most this often.
pub const PROCESS_POLL_NS: u64 = 100_000_000;
/// Per-process shares are taken over the samples of this long before the newest (several of
/// NVML's sampling periods, 1/6-1/5 s), by the samples' own timestamps.
pub const SHARE_WINDOW_US: u64 = 1_000_000;
/// At most this many samples are kept per GPU for the window.
const MAX_WINDOW_SAMPLES: usize = 4_096;
/// With no fit possible, a fully busy GPU is assumed to draw this fraction of its power limit
/// above idle.
const PRIOR_BUSY_FRACTION_OF_LIMIT: f64 = 0.8;

/// Why a GPU figure could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    #[error("not supported by this GPU")]
    NotSupported,
    #[error("the GPU is lost (fell off the bus or stopped answering)")]
    Lost,
    #[error("no data")]
    NotFound,
    #[error("{0}")]
    Other(String),
}

/// What does not change during a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuIdentity {
    pub name: String,
    pub uuid: String,
    pub memory_total_bytes: Option<u64>,
    pub power_limit_w: Option<f64>,
}

/// One per-process utilisation sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessSample {
    pub pid: u32,
    /// The driver's CPU timestamp, microseconds.
    pub timestamp_us: u64,
    /// SM (compute / 3D) utilisation of this process, percent.
    pub sm_pct: u32,
}

/// Everything one poll of one GPU returns; each figure may fail on its own.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuPoll {
    /// Total energy since the driver loaded, millijoules.
    pub energy_mj: Result<u64, GpuError>,
    pub power_mw: Result<u32, GpuError>,
    pub temperature_c: Result<u32, GpuError>,
    /// Percent of the last sample period during which a kernel ran.
    pub utilization_pct: Result<u32, GpuError>,
    pub memory_used_bytes: Result<u64, GpuError>,
    /// Per-process samples newer than the timestamp asked for (`None`: not asked this time).
    pub samples: Option<Result<Vec<ProcessSample>, GpuError>>,
    /// Pids with a compute or graphics context on the GPU (`None`: not asked this time).
    pub running_pids: Option<Result<Vec<u32>, GpuError>>,
}

impl GpuPoll {
    /// A poll in which everything failed with `err`.
    pub fn failed(err: GpuError) -> Self {
        GpuPoll {
            energy_mj: Err(err.clone()),
            power_mw: Err(err.clone()),
            temperature_c: Err(err.clone()),
            utilization_pct: Err(err.clone()),
            memory_used_bytes: Err(err.clone()),
            samples: Some(Err(err.clone())),
            running_pids: Some(Err(err)),
        }
    }
}

/// NVIDIA's accounting stats of one process over its life (`nvmlDeviceGetAccountingStats`,
/// with accounting mode on: `nvidia-smi -am 1`): the truth the per-process split is checked
/// against at the end of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccountedProcess {
    pub pid: u32,
    /// Percent of its life during which a kernel of it ran.
    pub gpu_utilization_pct: u32,
    /// How long its context was on the GPU, seconds: for a process still running, its life
    /// so far (NVML reports 0 until a process ends; [`life_so_far_s`]).
    pub time_s: f64,
    /// Still running when the stats were read (seen on a real H100: most processes of an
    /// attached or `--all` run are).
    pub running: bool,
}

/// Seconds from a running process's `start_us` (NVML's CPU timestamp, µs since the epoch) to
/// `now_us`; 0 when the stamp is in the future or more than a year old (not a reading).
pub fn life_so_far_s(start_us: u64, now_us: u64) -> f64 {
    const YEAR_US: u64 = 366 * 24 * 3600 * 1_000_000;
    match now_us.checked_sub(start_us) {
        Some(life_us) if life_us <= YEAR_US => life_us as f64 / 1e6,
        _ => 0.0,
    }
}

impl AccountedProcess {
    /// GPU-busy seconds: what its share of the GPU's active energy should follow.
    pub fn busy_s(&self) -> f64 {
        f64::from(self.gpu_utilization_pct.min(100)) / 100.0 * self.time_s
    }
}

/// Processes kept from one GPU's accounting stats (NVML keeps up to 4,000 by default).
pub const MAX_ACCOUNTED: usize = 4_096;

/// The GPU library: NVML in production, scripted readings in tests.
pub trait GpuBackend {
    /// Where the figures come from (`NVML (libnvidia-ml.so.1)`).
    fn describe(&self) -> String;
    fn device_count(&self) -> Result<u32, GpuError>;
    fn identity(&self, gpu: u32) -> Result<GpuIdentity, GpuError>;
    /// Reads GPU `gpu`; per-process figures only when `processes`, samples newer than
    /// `samples_since_us`.
    fn poll(&self, gpu: u32, processes: bool, samples_since_us: u64) -> GpuPoll;
    /// GPU `gpu`'s accounting stats, or `None` when accounting mode is off.
    fn accounting(&self, _gpu: u32) -> Result<Option<Vec<AccountedProcess>>, GpuError> {
        Err(GpuError::NotSupported)
    }
}

/// How a GPU's energy is obtained.
#[derive(Clone, Copy, Debug, PartialEq)]
enum EnergyMethod {
    /// NVML's total-energy counter (mJ), judged against [`counter::max_power_w`].
    Counter(CheckedCounter),
    /// Trapezoidal integration of power readings; the last power read.
    Power(Option<f64>),
}

/// Where a poll's per-process shares came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareBasis {
    /// Fresh per-process samples.
    Samples,
    /// No new samples: the previous shares of processes still running.
    Carried,
    /// No samples ever: the busy time split evenly among the running processes.
    RunningList,
    /// Nobody to give it to.
    None,
}

/// Per-process shares of a GPU's busy time for one poll (pure, see the module docs): from
/// `window`, the samples of the last [`SHARE_WINDOW_US`], when some are new since the last
/// poll (`fresh`); else the previous shares of the processes still running; else an even
/// split of the busy time among them.
pub fn shares(
    window: &[ProcessSample],
    fresh: bool,
    previous: &[(u32, f64)],
    running: Option<&[u32]>,
    busy_fraction: f64,
) -> (Vec<(u32, f64)>, ShareBasis) {
    let is_running = |pid: u32| running.is_none_or(|r| r.contains(&pid));
    if fresh {
        let mut per_pid: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
        for s in window {
            let e = per_pid.entry(s.pid).or_default();
            e.0 += f64::from(s.sm_pct.min(100)) / 100.0;
            e.1 += 1;
        }
        // The sampling periods the window holds: the most samples any process has in it. A
        // process that has just left keeps its share of the window: the GPU's tail after its
        // last kernels is its own.
        let periods = per_pid.values().map(|&(_, n)| n).max().unwrap_or(0);
        let shares: Vec<(u32, f64)> = per_pid
            .into_iter()
            .map(|(pid, (sum, _))| (pid, sum / f64::from(periods)))
            .collect();
        if !shares.is_empty() {
            return (shares, ShareBasis::Samples);
        }
    }
    let carried: Vec<(u32, f64)> = previous
        .iter()
        .copied()
        .filter(|(pid, _)| is_running(*pid))
        .collect();
    if !carried.is_empty() {
        return (carried, ShareBasis::Carried);
    }
    match running {
        Some(pids) if !pids.is_empty() && busy_fraction > 0.0 => {
            let each = busy_fraction / pids.len() as f64;
            (
                pids.iter().map(|&pid| (pid, each)).collect(),
                ShareBasis::RunningList,
            )
        }
        _ => (Vec::new(), ShareBasis::None),
    }
}

/// Run-long figures of one GPU, for the report (units in every numeric field name).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuSummary {
    /// NVML's index.
    pub index: u32,
    /// The energy domain (`gpu0`).
    pub domain: String,
    pub name: String,
    pub uuid: String,
    /// `energy counter`, `power integration`, or `energy counter, then power integration`.
    pub energy_method: String,
    /// Figures NVML measured.
    pub measured: Vec<&'static str>,
    /// Figures cg-trace derived from them.
    pub derived: Vec<&'static str>,
    pub avg_power_w: Option<f64>,
    pub max_power_w: Option<f64>,
    pub max_temperature_c: Option<u32>,
    pub avg_utilization_pct: Option<f64>,
    pub max_memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub power_limit_w: Option<f64>,
    pub polls_count: u64,
    pub read_errors_count: u64,
    /// Polls whose per-process shares were split evenly among running processes (no
    /// per-process utilisation available).
    pub even_split_polls_count: u64,
    /// `ok`, `degraded` (some reads failed) or `lost` (the GPU stopped answering).
    pub status: &'static str,
    /// NVIDIA's accounting stats at the end of the run, when accounting mode is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accounting: Option<Vec<AccountedProcess>>,
}

/// One GPU's state during a run.
#[derive(Debug)]
struct Device {
    index: u32,
    identity: GpuIdentity,
    energy: EnergyMethod,
    switched_to_power: bool,
    last_seen_us: u64,
    busy_fraction: f64,
    shares: Vec<(u32, f64)>,
    /// Per-process samples of the last [`SHARE_WINDOW_US`], oldest first.
    window: std::collections::VecDeque<ProcessSample>,
    lost: bool,
    /// Seconds of the run polled so far (the clock of [`RestTracker`]).
    clock_s: f64,
    /// Processes on the GPU at the last process poll (`None`: not known).
    running_count: Option<usize>,
    rest: RestTracker,
    /// Accounting stats read at the end of the run.
    accounting: Option<Vec<AccountedProcess>>,
    /// The figures of the last poll, for the time series.
    telemetry: GpuTelemetry,
    /// Seconds since the energy counter was last read successfully.
    since_energy_s: f64,
    /// Counter readings that were not plausible (see [`crate::sources::counter`]).
    glitches: BTreeMap<&'static str, u64>,
    // Telemetry.
    power_w_s: f64,
    power_s: f64,
    max_power_w: Option<f64>,
    max_temperature_c: Option<u32>,
    utilization_pct_s: f64,
    utilization_s: f64,
    max_memory_used_bytes: Option<u64>,
    polls: u64,
    even_split_polls: u64,
    errors: BTreeMap<String, u64>,
}

/// NVIDIA GPUs through a [`GpuBackend`].
pub struct GpuSource<B> {
    backend: B,
    devices: Vec<Device>,
    domains: Vec<DomainSpec>,
    since_poll_ns: u64,
    since_process_poll_ns: u64,
    activity: Vec<GpuActivity>,
    /// GPUs that could not be opened.
    open_notes: Vec<SourceNote>,
    /// Rest powers of earlier runs, by UUID.
    store: RestStore,
    /// When the source was opened, seconds since the Unix epoch (ages of stored rest powers).
    opened_unix_s: f64,
}

impl<B> std::fmt::Debug for GpuSource<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSource")
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

impl<B: GpuBackend> GpuSource<B> {
    /// Lists the GPUs and takes a first reading of each (energy counter or power, and the
    /// driver's buffered per-process samples, which are skipped). GPUs that do not answer are
    /// left out with a note; no GPU at all is an error. Rest powers of earlier runs are read
    /// from, and this run's kept in, `state_dir` ([`gpu_rest`]; `None`: nothing is kept).
    pub fn open(
        backend: B,
        lib: &std::path::Path,
        state_dir: Option<&std::path::Path>,
    ) -> Result<Self, SourceError> {
        let count = backend
            .device_count()
            .map_err(|err| SourceError::NvmlUnavailable {
                lib: lib.to_path_buf(),
                reason: format!("cannot count GPUs: {err}"),
                missing: false,
            })?;
        let mut devices = Vec::new();
        let mut open_notes = Vec::new();
        for index in 0..count {
            let identity = match backend.identity(index) {
                Ok(identity) => identity,
                Err(err) => {
                    open_notes.push(SourceNote::info(format!(
                        "GPU {index} left out: it does not answer NVML ({err})"
                    )));
                    continue;
                }
            };
            let first = backend.poll(index, true, 0);
            let energy = match first.energy_mj {
                Ok(mj) => {
                    let mut counter =
                        CheckedCounter::new(u64::MAX, 1e-3, counter::max_power_w(DomainKind::Gpu));
                    counter.reset(mj);
                    EnergyMethod::Counter(counter)
                }
                Err(_) => EnergyMethod::Power(first.power_mw.ok().map(|mw| f64::from(mw) / 1e3)),
            };
            let last_seen_us = match &first.samples {
                Some(Ok(samples)) => samples.iter().map(|s| s.timestamp_us).max().unwrap_or(0),
                _ => 0,
            };
            devices.push(Device {
                index,
                identity,
                energy,
                switched_to_power: false,
                last_seen_us,
                busy_fraction: 0.0,
                shares: Vec::new(),
                window: std::collections::VecDeque::new(),
                lost: false,
                clock_s: 0.0,
                running_count: None,
                rest: RestTracker::default(),
                accounting: None,
                telemetry: GpuTelemetry::default(),
                since_energy_s: 0.0,
                glitches: BTreeMap::new(),
                power_w_s: 0.0,
                power_s: 0.0,
                max_power_w: None,
                max_temperature_c: None,
                utilization_pct_s: 0.0,
                utilization_s: 0.0,
                max_memory_used_bytes: None,
                polls: 0,
                even_split_polls: 0,
                errors: BTreeMap::new(),
            });
        }
        if devices.is_empty() {
            return Err(SourceError::NvmlNoDevice {
                lib: lib.to_path_buf(),
            });
        }
        let domains = devices
            .iter()
            .enumerate()
            .map(|(n, d)| DomainSpec {
                name: format!("gpu{}", d.index),
                kind: DomainKind::Gpu,
                parent: None,
                coverage: Coverage::Gpu(n as u32),
                provenance: Provenance::Measured,
                source: "nvml",
            })
            .collect();
        let activity = vec![GpuActivity::default(); devices.len()];
        let opened_unix_s = unix_now_s();
        Ok(GpuSource {
            backend,
            devices,
            domains,
            since_poll_ns: 0,
            since_process_poll_ns: PROCESS_POLL_NS,
            activity,
            open_notes,
            store: RestStore::load(state_dir, opened_unix_s),
            opened_unix_s,
        })
    }

    /// Polls one GPU; returns its energy since the previous poll (`dt_s` ago).
    fn poll_device(&mut self, n: usize, dt_s: f64, processes: bool) -> Reading {
        let device = &mut self.devices[n];
        if device.lost {
            return Reading::unknown(Glitch::Unavailable);
        }
        let poll = self
            .backend
            .poll(device.index, processes, device.last_seen_us);
        device.polls += 1;
        let power_w = device.read_power(&poll.power_mw, dt_s);
        let energy = device.read_energy(&poll.energy_mj, power_w, dt_s);
        device.read_figures(&poll, dt_s);
        device.telemetry = telemetry(&poll, power_w, device.identity.memory_total_bytes);
        let util_pct = poll.utilization_pct.as_ref().ok().copied();
        if processes {
            device.read_processes(poll.samples, poll.running_pids);
        }
        device.clock_s += dt_s;
        device
            .rest
            .observe(device.clock_s, power_w, util_pct, device.running_count);
        if device.lost {
            device.busy_fraction = 0.0;
            device.shares.clear();
            device.telemetry = GpuTelemetry::default();
            return Reading::unknown(Glitch::Unavailable);
        }
        energy
    }
}

impl Device {
    /// Counts a failed read of `what` (a lost GPU is polled no more).
    fn count_error(&mut self, what: &str, err: &GpuError) {
        if *err == GpuError::Lost {
            self.lost = true;
        }
        *self.errors.entry(format!("{what}: {err}")).or_default() += 1;
    }

    /// The poll's power in watts, when read and plausible, added to the run's mean and
    /// maximum (`dt_s`: since the previous poll).
    fn read_power(&mut self, power_mw: &Result<u32, GpuError>, dt_s: f64) -> Option<f64> {
        let max_power_w = counter::max_power_w(DomainKind::Gpu);
        let power_w = match power_mw {
            Ok(mw) if f64::from(*mw) / 1e3 > max_power_w => {
                let err = GpuError::Other(format!(
                    "power reading of {} W is above the {max_power_w:.0} W a GPU can draw",
                    f64::from(*mw) / 1e3
                ));
                self.count_error("power", &err);
                None
            }
            Ok(mw) => Some(f64::from(*mw) / 1e3),
            Err(GpuError::NotSupported) => None,
            Err(err) => {
                self.count_error("power", err);
                None
            }
        };
        if let Some(w) = power_w {
            self.power_w_s += w * dt_s;
            self.power_s += dt_s;
            self.max_power_w = Some(self.max_power_w.map_or(w, |m: f64| m.max(w)));
        }
        power_w
    }

    /// The energy since the previous poll (`dt_s` ago): from the energy counter, or from
    /// the power readings (the mean of the last two) on a GPU without one; a counter the GPU
    /// stops supporting gives way to the power readings for good.
    fn read_energy(
        &mut self,
        energy_mj: &Result<u64, GpuError>,
        power_w: Option<f64>,
        dt_s: f64,
    ) -> Reading {
        self.since_energy_s += dt_s;
        match (&mut self.energy, energy_mj) {
            (EnergyMethod::Counter(counter), Ok(mj)) => {
                let since_ns = (self.since_energy_s * 1e9) as u64;
                self.since_energy_s = 0.0;
                // A zero-length poll (the session's first read) only moves the origin.
                match counter.advance(*mj, since_ns) {
                    Ok(j) => Reading::Joules(j),
                    Err((glitch, _)) => {
                        *self.glitches.entry(glitch.describe()).or_default() += 1;
                        Reading::unknown(glitch)
                    }
                }
            }
            (EnergyMethod::Counter(_), Err(GpuError::NotSupported)) => {
                self.switched_to_power = true;
                self.energy = EnergyMethod::Power(power_w);
                self.since_energy_s = 0.0;
                Reading::Joules(power_w.unwrap_or(0.0) * dt_s)
            }
            (EnergyMethod::Counter(_), Err(err)) => {
                // The counter keeps its last value: this energy shows up in the next good read.
                self.count_error("energy", err);
                Reading::Pending
            }
            (EnergyMethod::Power(last), _) => {
                self.since_energy_s = 0.0;
                let joules = match (*last, power_w) {
                    (Some(a), Some(b)) => (a + b) / 2.0 * dt_s,
                    (Some(a), None) | (None, Some(a)) => a * dt_s,
                    (None, None) => 0.0,
                };
                if power_w.is_some() {
                    *last = power_w;
                }
                Reading::Joules(joules)
            }
        }
    }

    /// The poll's temperature, memory and utilisation, added to the run's maxima and means
    /// (`dt_s`: since the previous poll); the utilisation is the GPU's busy fraction now.
    fn read_figures(&mut self, poll: &GpuPoll, dt_s: f64) {
        match &poll.temperature_c {
            Ok(c) => {
                self.max_temperature_c = Some(self.max_temperature_c.map_or(*c, |m| m.max(*c)))
            }
            Err(GpuError::NotSupported) => {}
            Err(err) => self.count_error("temperature", err),
        }
        match &poll.memory_used_bytes {
            Ok(b) => {
                self.max_memory_used_bytes =
                    Some(self.max_memory_used_bytes.map_or(*b, |m| m.max(*b)))
            }
            Err(GpuError::NotSupported) => {}
            Err(err) => self.count_error("memory", err),
        }
        match &poll.utilization_pct {
            Ok(pct) => {
                self.busy_fraction = f64::from((*pct).min(100)) / 100.0;
                self.utilization_pct_s += f64::from(*pct) * dt_s;
                self.utilization_s += dt_s;
            }
            Err(GpuError::NotSupported) => {}
            Err(err) => self.count_error("utilisation", err),
        }
    }

    /// The per-process samples and the list of processes on the GPU, when asked for: the
    /// samples newer than those seen join the window of the last [`SHARE_WINDOW_US`], and
    /// the processes' shares of the GPU are worked out again from it.
    fn read_processes(
        &mut self,
        samples: Option<Result<Vec<ProcessSample>, GpuError>>,
        running_pids: Option<Result<Vec<u32>, GpuError>>,
    ) {
        let samples = match samples {
            Some(Ok(samples)) => samples,
            Some(Err(GpuError::NotFound | GpuError::NotSupported)) | None => Vec::new(),
            Some(Err(err)) => {
                self.count_error("process utilisation", &err);
                Vec::new()
            }
        };
        let new_samples = self.add_to_window(samples);
        let running = match running_pids {
            Some(Ok(pids)) => Some(pids),
            Some(Err(GpuError::NotSupported)) | None => None,
            Some(Err(err)) => {
                self.count_error("process list", &err);
                None
            }
        };
        let (shares, basis) = shares(
            self.window.make_contiguous(),
            new_samples,
            &self.shares,
            running.as_deref(),
            self.busy_fraction,
        );
        if basis == ShareBasis::RunningList {
            self.even_split_polls += 1;
        }
        self.shares = shares;
        self.running_count = running.as_ref().map(Vec::len);
    }

    /// Adds the samples newer than the last seen to the window, and drops those older than
    /// [`SHARE_WINDOW_US`] (or past [`MAX_WINDOW_SAMPLES`]); returns whether any was new.
    fn add_to_window(&mut self, samples: Vec<ProcessSample>) -> bool {
        let mut fresh: Vec<ProcessSample> = samples
            .into_iter()
            .filter(|s| s.timestamp_us > self.last_seen_us)
            .collect();
        fresh.sort_by_key(|s| s.timestamp_us);
        if let Some(max) = fresh.last().map(|s| s.timestamp_us) {
            self.last_seen_us = max;
        }
        let new_samples = !fresh.is_empty();
        self.window.extend(fresh);
        let oldest_us = self.last_seen_us.saturating_sub(SHARE_WINDOW_US);
        while self
            .window
            .front()
            .is_some_and(|s| s.timestamp_us <= oldest_us)
            || self.window.len() > MAX_WINDOW_SAMPLES
        {
            self.window.pop_front();
        }
        new_samples
    }
}

/// Temperatures above this are not a GPU's (silicon shuts down near 100 °C): not shown.
const MAX_TEMPERATURE_C: u32 = 200;

/// A poll's own figures (`power_w`: its power reading once judged plausible): utilisation
/// capped at 100 % like the busy fraction, memory at the GPU's total, implausible
/// temperatures left out.
fn telemetry(poll: &GpuPoll, power_w: Option<f64>, memory_total: Option<u64>) -> GpuTelemetry {
    let memory = poll.memory_used_bytes.as_ref().ok().copied();
    GpuTelemetry {
        utilization_pct: poll
            .utilization_pct
            .as_ref()
            .ok()
            .map(|p| f64::from((*p).min(100))),
        memory_used_bytes: memory.map(|b| memory_total.map_or(b, |t| b.min(t)) as f64),
        temperature_c: poll
            .temperature_c
            .as_ref()
            .ok()
            .filter(|c| **c <= MAX_TEMPERATURE_C)
            .map(|c| f64::from(*c)),
        power_w,
    }
}

impl<B: GpuBackend> EnergySource for GpuSource<B> {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn provenance(&self) -> Provenance {
        Provenance::Measured
    }

    fn domains(&self) -> &[DomainSpec] {
        &self.domains
    }

    fn read(&mut self, ctx: &ReadContext<'_>) -> Result<Vec<Reading>, SourceError> {
        if ctx.duration_ns == 0 {
            // A zero-length read sets the starting point (the session's first read, after
            // the probes loaded): what the GPUs used since opening is not the run's.
            for n in 0..self.devices.len() {
                self.poll_device(n, 0.0, true);
            }
            self.since_poll_ns = 0;
            self.since_process_poll_ns = 0;
            return Ok(vec![Reading::Joules(0.0); self.devices.len()]);
        }
        self.since_poll_ns += ctx.duration_ns;
        self.since_process_poll_ns += ctx.duration_ns;
        if self.since_poll_ns < MIN_POLL_NS {
            // Faster than NVML refreshes: this interval's energy arrives with the next poll.
            return Ok(vec![Reading::Joules(0.0); self.devices.len()]);
        }
        let dt_s = self.since_poll_ns as f64 / 1e9;
        self.since_poll_ns = 0;
        let processes = self.since_process_poll_ns >= PROCESS_POLL_NS;
        if processes {
            self.since_process_poll_ns = 0;
        }
        let energy = (0..self.devices.len())
            .map(|n| self.poll_device(n, dt_s, processes))
            .collect();
        self.activity = self
            .devices
            .iter()
            .map(|d| GpuActivity {
                busy_fraction: d.busy_fraction,
                processes: d.shares.clone(),
                telemetry: d.telemetry,
            })
            .collect();
        Ok(energy)
    }

    fn describe(&self) -> String {
        let names: Vec<String> = self
            .devices
            .iter()
            .map(|d| format!("gpu{} {}", d.index, d.identity.name))
            .collect();
        format!("{}: {}", self.backend.describe(), names.join(", "))
    }

    fn gpu_activity(&self) -> Vec<GpuActivity> {
        self.activity.clone()
    }

    fn rest_power(&self) -> Option<Vec<Option<RestPower>>> {
        Some(
            self.devices
                .iter()
                .map(|d| {
                    gpu_rest::choose(
                        d.rest.lowest_w(),
                        self.store.get(&d.identity.uuid),
                        gpu_rest::table_rest_w(&d.identity.name),
                        self.opened_unix_s,
                    )
                })
                .collect(),
        )
    }

    /// The run is over: the rest powers seen in it are kept for later runs, and NVIDIA's
    /// accounting stats are read where accounting mode is on. The live reads stand.
    fn settle(&mut self, _spans: &[WallSpan]) -> Option<Result<Vec<Vec<f64>>, SourceError>> {
        let now = unix_now_s();
        for d in &mut self.devices {
            if let Some(w) = d.rest.lowest_w() {
                self.store.keep(&d.identity.uuid, &d.identity.name, w, now);
            }
            if !d.lost {
                d.accounting = self.backend.accounting(d.index).ok().flatten();
            }
        }
        None
    }

    fn busy_slope_w(&self) -> Option<Vec<f64>> {
        Some(
            self.devices
                .iter()
                .map(|d| {
                    d.identity.power_limit_w.or(d.max_power_w).unwrap_or(0.0)
                        * PRIOR_BUSY_FRACTION_OF_LIMIT
                })
                .collect(),
        )
    }

    fn summary(&self) -> SourceSummary {
        let mut notes = self.open_notes.clone();
        notes.extend(self.store.notes.iter().cloned());
        let mut gpus = Vec::new();
        for (d, spec) in self.devices.iter().zip(&self.domains) {
            let label = format!("{} ({})", spec.name, d.identity.name);
            let counter = matches!(d.energy, EnergyMethod::Counter(_));
            let energy_method = match (counter, d.switched_to_power) {
                (true, _) => "energy counter",
                (false, true) => "energy counter, then power integration",
                (false, false) => "power integration",
            };
            let mut measured = vec![
                "power_w",
                "temperature_c",
                "utilization_pct",
                "memory_used_bytes",
            ];
            let mut derived = vec!["per-process energy_j (by utilisation share)"];
            if counter {
                measured.insert(0, "energy_j");
            } else {
                derived.insert(0, "energy_j (integrated from power_w)");
                notes.push(SourceNote::info(format!(
                    "{label}: no energy counter; its energy is integrated from NVML's power \
                     readings (derived, not measured)"
                )));
            }
            let read_errors: u64 = d.errors.values().sum();
            if d.lost {
                notes.push(SourceNote::degraded(format!(
                    "{label} stopped answering NVML during the run (GPU lost after {} polls): \
                     its energy from then on is missing",
                    d.polls
                )));
            }
            for (error, count) in &d.errors {
                notes.push(SourceNote::degraded(format!(
                    "{label}: {count} NVML read(s) failed: {error}"
                )));
            }
            for (glitch, count) in &d.glitches {
                notes.push(SourceNote::info(format!(
                    "{label}: {count} energy counter reading(s) not plausible: {glitch}"
                )));
            }
            if d.even_split_polls > 0 {
                notes.push(SourceNote::info(format!(
                    "{label}: no per-process utilisation in {} poll(s); its busy time was split \
                     evenly among the processes running on it",
                    d.even_split_polls
                )));
            }
            gpus.push(GpuSummary {
                index: d.index,
                domain: spec.name.clone(),
                name: d.identity.name.clone(),
                uuid: d.identity.uuid.clone(),
                energy_method: energy_method.to_string(),
                measured,
                derived,
                avg_power_w: (d.power_s > 0.0).then(|| d.power_w_s / d.power_s),
                max_power_w: d.max_power_w,
                max_temperature_c: d.max_temperature_c,
                avg_utilization_pct: (d.utilization_s > 0.0)
                    .then(|| d.utilization_pct_s / d.utilization_s),
                max_memory_used_bytes: d.max_memory_used_bytes,
                memory_total_bytes: d.identity.memory_total_bytes,
                power_limit_w: d.identity.power_limit_w,
                polls_count: d.polls,
                read_errors_count: read_errors,
                even_split_polls_count: d.even_split_polls,
                accounting: d.accounting.clone(),
                status: if d.lost {
                    "lost"
                } else if read_errors > 0 {
                    "degraded"
                } else {
                    "ok"
                },
            });
        }
        SourceSummary {
            notes,
            gpus,
            meter: None,
        }
    }
}

/// Now, seconds since the Unix epoch.
fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, collections::VecDeque, path::Path, rc::Rc};

    use super::*;

    #[test]
    fn a_running_processs_life_so_far_is_read_from_its_start_stamp() {
        assert_eq!(life_so_far_s(1_000_000, 13_500_000), 12.5);
        // A stamp in the future or from more than a year ago is not a reading.
        assert_eq!(life_so_far_s(13_500_000, 1_000_000), 0.0);
        assert_eq!(life_so_far_s(0, 400 * 24 * 3600 * 1_000_000), 0.0);
    }

    /// Scripted GPUs: each poll pops the next reading of that GPU (the last one repeats).
    #[derive(Clone, Default)]
    struct Script {
        identities: Vec<Result<GpuIdentity, GpuError>>,
        polls: Rc<RefCell<Vec<VecDeque<GpuPoll>>>>,
        asked: Rc<RefCell<Vec<(u32, bool, u64)>>>,
    }

    impl GpuBackend for Script {
        fn describe(&self) -> String {
            "scripted".into()
        }
        fn device_count(&self) -> Result<u32, GpuError> {
            Ok(self.identities.len() as u32)
        }
        fn identity(&self, gpu: u32) -> Result<GpuIdentity, GpuError> {
            self.identities[gpu as usize].clone()
        }
        fn poll(&self, gpu: u32, processes: bool, since_us: u64) -> GpuPoll {
            self.asked.borrow_mut().push((gpu, processes, since_us));
            let mut polls = self.polls.borrow_mut();
            let queue = &mut polls[gpu as usize];
            if queue.len() > 1 {
                queue.pop_front().unwrap()
            } else {
                queue.front().unwrap().clone()
            }
        }
    }

    fn identity(name: &str) -> Result<GpuIdentity, GpuError> {
        Ok(GpuIdentity {
            name: name.into(),
            uuid: format!("GPU-{name}"),
            memory_total_bytes: Some(16 << 30),
            power_limit_w: Some(300.0),
        })
    }

    fn poll(energy_mj: Result<u64, GpuError>, power_mw: u32, util: u32) -> GpuPoll {
        GpuPoll {
            energy_mj,
            power_mw: Ok(power_mw),
            temperature_c: Ok(50),
            utilization_pct: Ok(util),
            memory_used_bytes: Ok(1 << 30),
            samples: Some(Ok(Vec::new())),
            running_pids: Some(Ok(Vec::new())),
        }
    }

    fn with_samples(mut p: GpuPoll, samples: &[(u32, u64, u32)], running: &[u32]) -> GpuPoll {
        p.samples = Some(Ok(samples
            .iter()
            .map(|&(pid, timestamp_us, sm_pct)| ProcessSample {
                pid,
                timestamp_us,
                sm_pct,
            })
            .collect()));
        p.running_pids = Some(Ok(running.to_vec()));
        p
    }

    fn ctx(ms: u64) -> ReadContext<'static> {
        ReadContext {
            duration_ns: ms * 1_000_000,
            busy_ns_per_cpu: &[],
            wall_start_ns: 0,
            wall_end_ns: ms * 1_000_000,
        }
    }

    fn joules(readings: &[Reading]) -> Vec<f64> {
        readings
            .iter()
            .map(|r| r.joules().unwrap_or_else(|| panic!("{readings:?}")))
            .collect()
    }

    fn open(script: &Script) -> GpuSource<Script> {
        GpuSource::open(script.clone(), Path::new("libnvidia-ml.so.1"), None).unwrap()
    }

    #[test]
    fn energy_comes_from_the_counter_and_shares_from_process_samples() {
        let script = Script {
            identities: vec![identity("A100")],
            ..Script::default()
        };
        script.polls.borrow_mut().push(VecDeque::from([
            // At open: the driver's buffered samples up to t=500 µs are skipped.
            with_samples(poll(Ok(10_000), 50_000, 0), &[(9, 500, 100)], &[]),
            // 100 ms later: 12 J more; pid 7 used 60 %, pid 8 20 %, in two samples each.
            with_samples(
                poll(Ok(22_000), 120_000, 90),
                &[(7, 600, 50), (7, 700, 70), (8, 650, 20), (8, 690, 20)],
                &[7, 8],
            ),
        ]));
        let mut gpu = open(&script);
        assert_eq!(gpu.domains()[0].name, "gpu0");
        assert_eq!(gpu.domains()[0].coverage, Coverage::Gpu(0));
        let j = joules(&gpu.read(&ctx(100)).unwrap());
        assert!((j[0] - 12.0).abs() < 1e-9, "{j:?}");
        let activity = gpu.gpu_activity();
        assert!((activity[0].busy_fraction - 0.9).abs() < 1e-9);
        assert_eq!(activity[0].processes, vec![(7, 0.6), (8, 0.2)]);
        // This poll asked for samples after those skipped at open; the next process poll
        // (100 ms later) asks for those after the newest seen.
        assert_eq!(script.asked.borrow().last(), Some(&(0, true, 500)));
        gpu.read(&ctx(100)).unwrap();
        assert_eq!(script.asked.borrow().last(), Some(&(0, true, 700)));
        let summary = gpu.summary();
        let g = &summary.gpus[0];
        assert_eq!((g.name.as_str(), g.uuid.as_str()), ("A100", "GPU-A100"));
        assert_eq!(g.energy_method, "energy counter");
        assert!(g.measured.contains(&"energy_j"));
        assert_eq!(g.status, "ok");
        assert!(summary.notes.is_empty(), "{:?}", summary.notes);
    }

    #[test]
    fn each_read_carries_the_last_polls_telemetry_bounded_and_without_the_figures_that_failed() {
        let script = Script {
            identities: vec![identity("H100")],
            ..Script::default()
        };
        let mut hot = poll(Ok(1_000), 700_000, 150);
        hot.memory_used_bytes = Ok(u64::MAX);
        let mut odd = poll(Ok(2_000), 80_000, 3);
        odd.temperature_c = Ok(u32::MAX);
        odd.memory_used_bytes = Err(GpuError::NotSupported);
        script
            .polls
            .borrow_mut()
            .push(VecDeque::from([poll(Ok(0), 1, 0), hot, odd]));
        let mut gpu = open(&script);
        gpu.read(&ctx(100)).unwrap();
        let t = gpu.gpu_activity()[0].telemetry;
        assert_eq!(t.utilization_pct, Some(100.0));
        assert_eq!(t.memory_used_bytes, Some((16u64 << 30) as f64));
        assert_eq!((t.temperature_c, t.power_w), (Some(50.0), Some(700.0)));
        // A read too soon after for a poll keeps the last poll's figures.
        gpu.read(&ctx(1)).unwrap();
        assert_eq!(gpu.gpu_activity()[0].telemetry, t);
        gpu.read(&ctx(100)).unwrap();
        let t = gpu.gpu_activity()[0].telemetry;
        assert_eq!((t.utilization_pct, t.power_w), (Some(3.0), Some(80.0)));
        assert_eq!((t.temperature_c, t.memory_used_bytes), (None, None));
    }

    #[test]
    fn without_an_energy_counter_power_is_integrated_and_marked_derived() {
        let script = Script {
            identities: vec![identity("P100")],
            ..Script::default()
        };
        script.polls.borrow_mut().push(VecDeque::from([
            poll(Err(GpuError::NotSupported), 100_000, 0),
            poll(Err(GpuError::NotSupported), 200_000, 50),
        ]));
        let mut gpu = open(&script);
        // (100 W + 200 W) / 2 over 0.5 s.
        let j = joules(&gpu.read(&ctx(500)).unwrap());
        assert!((j[0] - 75.0).abs() < 1e-9, "{j:?}");
        let j = joules(&gpu.read(&ctx(500)).unwrap());
        assert!((j[0] - 100.0).abs() < 1e-9, "{j:?}");
        let summary = gpu.summary();
        assert_eq!(summary.gpus[0].energy_method, "power integration");
        assert!(summary.gpus[0].derived[0].starts_with("energy_j"));
        assert!(
            summary
                .notes
                .iter()
                .any(|n| n.text.contains("derived") && !n.degraded),
            "{:?}",
            summary.notes
        );
    }

    #[test]
    fn polls_no_faster_than_nvml_refreshes_and_loses_no_energy() {
        let script = Script {
            identities: vec![identity("A")],
            ..Script::default()
        };
        script
            .polls
            .borrow_mut()
            .push(VecDeque::from([poll(Ok(0), 1, 0), poll(Ok(4_000), 1, 0)]));
        let mut gpu = open(&script);
        let mut total = 0.0;
        for _ in 0..10 {
            total += joules(&gpu.read(&ctx(1)).unwrap())[0];
        }
        // Ten 1 ms reads: one poll, at the 10th.
        assert_eq!(script.asked.borrow().len(), 2);
        assert!((total - 4.0).abs() < 1e-9);
    }

    #[test]
    fn a_zero_length_read_sets_the_starting_point() {
        let script = Script {
            identities: vec![identity("A")],
            ..Script::default()
        };
        script.polls.borrow_mut().push(VecDeque::from([
            poll(Ok(0), 1, 0),
            // 5 J while the probes loaded: not the run's.
            poll(Ok(5_000), 1, 0),
            poll(Ok(6_000), 1, 0),
        ]));
        let mut gpu = open(&script);
        assert_eq!(joules(&gpu.read(&ctx(0)).unwrap()), vec![0.0]);
        assert_eq!(joules(&gpu.read(&ctx(100)).unwrap()), vec![1.0]);
        assert!(gpu.summary().notes.is_empty(), "{:?}", gpu.summary().notes);
    }

    #[test]
    fn a_gpu_lost_mid_run_is_degraded_and_the_run_goes_on() {
        let script = Script {
            identities: vec![identity("A"), identity("B")],
            ..Script::default()
        };
        script.polls.borrow_mut().extend([
            VecDeque::from([
                poll(Ok(0), 1, 0),
                poll(Ok(1_000), 1, 10),
                GpuPoll::failed(GpuError::Lost),
            ]),
            VecDeque::from([poll(Ok(0), 1, 0), poll(Ok(2_000), 1, 10)]),
        ]);
        let mut gpu = open(&script);
        assert_eq!(joules(&gpu.read(&ctx(100)).unwrap()), vec![1.0, 2.0]);
        // From then on the lost GPU's energy is unknown, not 0 J.
        assert_eq!(
            gpu.read(&ctx(100)).unwrap(),
            vec![Reading::unknown(Glitch::Unavailable), Reading::Joules(0.0)]
        );
        let polls_before = script.asked.borrow().len();
        gpu.read(&ctx(100)).unwrap();
        // The lost GPU is not asked again; the other one is.
        assert_eq!(script.asked.borrow().len(), polls_before + 1);
        let summary = gpu.summary();
        assert_eq!(summary.gpus[0].status, "lost");
        assert_eq!(summary.gpus[1].status, "ok");
        assert!(
            summary
                .notes
                .iter()
                .any(|n| n.degraded && n.text.contains("gpu0 (A) stopped")),
            "{:?}",
            summary.notes
        );
        assert_eq!(gpu.gpu_activity()[0], GpuActivity::default());
    }

    #[test]
    fn a_failed_counter_read_shows_up_in_the_next_good_one() {
        let script = Script {
            identities: vec![identity("A")],
            ..Script::default()
        };
        script.polls.borrow_mut().push(VecDeque::from([
            poll(Ok(0), 1, 0),
            poll(Err(GpuError::Other("Unknown Error".into())), 1, 0),
            poll(Ok(3_000), 1, 0),
        ]));
        let mut gpu = open(&script);
        // The session spreads the next good reading over the intervals it covers.
        assert_eq!(gpu.read(&ctx(100)).unwrap(), vec![Reading::Pending]);
        assert_eq!(joules(&gpu.read(&ctx(100)).unwrap()), vec![3.0]);
        let summary = gpu.summary();
        assert_eq!(summary.gpus[0].status, "degraded");
        assert!(
            summary
                .notes
                .iter()
                .any(|n| n.text.contains("Unknown Error"))
        );
    }

    #[test]
    fn an_implausible_counter_reading_is_unknown_energy() {
        let script = Script {
            identities: vec![identity("A")],
            ..Script::default()
        };
        script.polls.borrow_mut().push(VecDeque::from([
            poll(Ok(1_000_000), 1, 0),
            // Back by 1 J: as a wraparound of a 64-bit mJ counter, far beyond any GPU.
            poll(Ok(999_000), 1, 0),
            poll(Ok(1_029_000), 1, 0),
            // +1000 J in 100 ms: 10 kW.
            poll(Ok(2_029_000), 1, 0),
            poll(Ok(2_059_000), 1, 0),
            // A power reading of 4 MW is not one.
            GpuPoll {
                power_mw: Ok(4_000_000_000),
                ..poll(Ok(2_089_000), 1, 0)
            },
        ]));
        let mut gpu = open(&script);
        assert_eq!(
            gpu.read(&ctx(100)).unwrap(),
            vec![Reading::unknown(Glitch::StepBack)]
        );
        assert_eq!(joules(&gpu.read(&ctx(100)).unwrap()), vec![30.0]);
        assert_eq!(
            gpu.read(&ctx(100)).unwrap(),
            vec![Reading::unknown(Glitch::Jump)]
        );
        assert_eq!(joules(&gpu.read(&ctx(100)).unwrap()), vec![30.0]);
        assert_eq!(joules(&gpu.read(&ctx(100)).unwrap()), vec![30.0]);
        let summary = gpu.summary();
        assert_eq!(
            summary.gpus[0].max_power_w,
            Some(0.001),
            "{:?}",
            summary.gpus[0]
        );
        assert!(
            summary
                .notes
                .iter()
                .any(|n| n.text.contains("above the 3000 W")),
            "{:?}",
            summary.notes
        );
    }

    #[test]
    fn unanswering_gpus_are_left_out_and_none_at_all_is_an_error() {
        let script = Script {
            identities: vec![Err(GpuError::Lost), identity("B")],
            ..Script::default()
        };
        script.polls.borrow_mut().extend([
            VecDeque::from([poll(Ok(0), 1, 0)]),
            VecDeque::from([poll(Ok(0), 1, 0)]),
        ]);
        let gpu = open(&script);
        assert_eq!(gpu.domains()[0].name, "gpu1");
        assert_eq!(gpu.domains()[0].coverage, Coverage::Gpu(0));
        assert!(gpu.summary().notes[0].text.contains("GPU 0 left out"));
        let none = Script::default();
        let err = GpuSource::open(none, Path::new("lib"), None).unwrap_err();
        assert!(matches!(err, SourceError::NvmlNoDevice { .. }), "{err}");
    }

    #[test]
    fn shares_carry_over_between_samples_and_fall_back_to_the_running_list() {
        let sample = |pid, sm_pct| ProcessSample {
            pid,
            timestamp_us: 1,
            sm_pct,
        };
        let (s, basis) = shares(&[sample(1, 40), sample(1, 60)], true, &[], None, 0.5);
        assert_eq!((s, basis), (vec![(1, 0.5)], ShareBasis::Samples));
        // No new samples: keep the last shares of processes still running.
        let (s, basis) = shares(&[], false, &[(1, 0.5), (2, 0.1)], Some(&[1]), 0.5);
        assert_eq!((s, basis), (vec![(1, 0.5)], ShareBasis::Carried));
        // Never any samples: split the busy time evenly among running processes.
        let (s, basis) = shares(&[], false, &[], Some(&[3, 4]), 0.8);
        assert_eq!(
            (s, basis),
            (vec![(3, 0.4), (4, 0.4)], ShareBasis::RunningList)
        );
        // Idle GPU, nobody running: nothing.
        assert_eq!(shares(&[], false, &[], Some(&[]), 0.0).1, ShareBasis::None);
    }

    #[test]
    fn one_stray_sample_weighs_one_period_of_the_window_not_the_whole_poll() {
        // The recorded H100 near the end of its heavy phase (trace2, t = 17.7-18.7 s): one
        // sample per 0.2 s tick, each naming one process; at 18.5 s the light one (L, 1 % of
        // the GPU by NVIDIA's accounting) is named at 98 % and the heavy one (H) is not:
        //   tick  |17.7 17.9 18.1 18.3 18.5|
        //   H     | 98   99   98   98   .  |
        //   L     |  .    .    .    .   98 |
        // Over the poll's own samples (one tick) L would get the whole GPU and H nothing;
        // over the window, H has 4 of 5 periods at ~98 %, L 1 at 98 %.
        let tick = |n: u64, pid, sm_pct| ProcessSample {
            pid,
            timestamp_us: 17_700_000 + n * 200_000,
            sm_pct,
        };
        let window = [
            tick(0, 1, 98),
            tick(1, 1, 99),
            tick(2, 1, 98),
            tick(3, 1, 98),
            tick(4, 2, 98),
        ];
        let (s, basis) = shares(&window, true, &[(1, 0.98)], Some(&[1, 2]), 0.98);
        assert_eq!(basis, ShareBasis::Samples);
        let share = |pid| s.iter().find(|(p, _)| *p == pid).unwrap().1;
        assert!((share(1) - 393.0 / 400.0).abs() < 1e-9, "{s:?}");
        assert!((share(2) - 98.0 / 400.0).abs() < 1e-9, "{s:?}");
        // H has just left the GPU (its tail, ~125 W for a second, is H's), and the window
        // still weighs L's stray sample as one period of four.
        let (s2, _) = shares(&window, true, &[], Some(&[2]), 0.0);
        assert_eq!(s2, s);
    }

    #[test]
    fn the_share_window_follows_the_samples_timestamps_across_polls() {
        let script = Script {
            identities: vec![identity("H100")],
            ..Script::default()
        };
        // Polls 0.1 s apart bring the samples of their ticks (µs timestamps, 0.2 s apart);
        // the third brings only the stray sample of pid 8.
        let at = |ticks: &[(u32, u64, u32)]| with_samples(poll(Ok(0), 700_000, 98), ticks, &[7, 8]);
        script.polls.borrow_mut().push(VecDeque::from([
            at(&[]),
            at(&[(7, 1_000_000, 98), (7, 1_200_000, 98)]),
            at(&[(7, 1_400_000, 98)]),
            at(&[(8, 1_600_000, 98)]),
            // 1.2 s later: the window holds pid 7's newest samples only.
            at(&[(7, 2_800_000, 90), (7, 3_000_000, 90)]),
        ]));
        let mut gpu = open(&script);
        for _ in 0..3 {
            gpu.read(&ctx(100)).unwrap();
        }
        let activity = gpu.gpu_activity();
        let share = |a: &GpuActivity, pid| a.processes.iter().find(|(p, _)| *p == pid).map(|s| s.1);
        // pid 7: 3 periods at 98 %; pid 8: 1 of 3 periods at 98 %.
        assert!(
            (share(&activity[0], 7).unwrap() - 0.98).abs() < 1e-9,
            "{activity:?}"
        );
        assert!(
            (share(&activity[0], 8).unwrap() - 0.98 / 3.0).abs() < 1e-9,
            "{activity:?}"
        );
        gpu.read(&ctx(100)).unwrap();
        let activity = gpu.gpu_activity();
        assert!(
            (share(&activity[0], 7).unwrap() - 0.9).abs() < 1e-9,
            "{activity:?}"
        );
        assert_eq!(share(&activity[0], 8), None);
    }
}
