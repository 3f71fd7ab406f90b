//! RAPL energy counters through the perf `power` PMU (and AMD's per-core `power_core` PMU):
//! 64-bit counts that do not wrap in practice, one syscall per read, readable with
//! CAP_PERFMON where powercap's `energy_uj` is root-only. `auto` prefers this source.
//!
//! Layout under the root (`/sys/bus/event_source/devices`):
//!
//! ```text
//! power/type                       PMU type for perf_event_attr.type
//! power/cpumask                    one CPU per package (per die): open each counter there
//! power/format/event               "config:0-7": where the event code goes in attr.config
//! power/events/energy-pkg          "event=0x02"
//! power/events/energy-pkg.scale    "2.3283064365386962890625e-10" (joules per count)
//! power/events/energy-pkg.unit     "Joules"
//! power_core/...                   AMD: energy-core, one CPU per core in its cpumask
//! ```
//!
//! Domains follow powercap's names and nesting, so the report's topology is the same whichever
//! interface was read: `energy-pkg` -> `package-N`, `energy-cores` -> `core-N` (inside the
//! package), `energy-gpu` -> `uncore-N` (inside the package), `energy-ram` -> `dram-N`,
//! `energy-psys` -> `psys` (covering packages and DRAM). AMD's per-core counters are summed
//! per package into `core-N`. The perf syscall sits behind a [`CounterOpener`], so tests feed
//! counts through pipes and files and run the real discovery and scaling code.

use std::{
    collections::BTreeMap,
    fs::{self, File},
    io::{self, Read},
    os::{fd::FromRawFd, unix::fs::FileExt},
    path::{Path, PathBuf},
};

use super::{
    DomainKind, DomainSpec, EnergySource, Provenance, ReadContext, Reading, SourceError,
    SourceNote, SourceSummary, busy_cpus,
    counter::{self, CheckedCounter, FreezeWatch},
    human_duration,
    powercap::human_power,
};
use crate::{
    attribution::{Coverage, Glitch},
    host::{HostInfo, parse_cpu_list},
};

/// Where the kernel lists perf event sources.
pub const DEFAULT_ROOT: &str = "/sys/bus/event_source/devices";

/// One counter to open: a perf event on one CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterRequest {
    /// `power` or `power_core`.
    pub pmu: String,
    /// `energy-pkg`, `energy-core`, ...
    pub event: String,
    /// `perf_event_attr.type`.
    pub pmu_type: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    pub cpu: u32,
}

impl CounterRequest {
    fn describe(&self) -> String {
        format!("{}/{}/ on CPU {}", self.pmu, self.event, self.cpu)
    }
}

/// Something that yields a counter's current raw count.
pub trait CounterReader {
    fn read_count(&mut self) -> io::Result<u64>;
}

/// Opens counters: [`SyscallOpener`] in production, pipes or files in tests.
pub trait CounterOpener {
    fn open(&self, request: &CounterRequest) -> io::Result<Box<dyn CounterReader>>;
}

impl<F> CounterOpener for F
where
    F: Fn(&CounterRequest) -> io::Result<Box<dyn CounterReader>>,
{
    fn open(&self, request: &CounterRequest) -> io::Result<Box<dyn CounterReader>> {
        self(request)
    }
}

/// A counter read as consecutive 8-byte native-endian counts: a perf event fd (each `read`
/// returns the current count) or a pipe a test writes counts into.
pub struct StreamCounter<R>(pub R);

impl<R: Read> CounterReader for StreamCounter<R> {
    fn read_count(&mut self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        self.0.read_exact(&mut buf)?;
        Ok(u64::from_ne_bytes(buf))
    }
}

/// A counter kept in a regular file as an 8-byte native-endian count at offset 0, which a
/// writer updates in place (see [`FileOpener`]).
pub struct FileCounter(pub File);

impl CounterReader for FileCounter {
    fn read_count(&mut self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        self.0.read_exact_at(&mut buf, 0)?;
        Ok(u64::from_ne_bytes(buf))
    }
}

/// Opens real perf events with `perf_event_open(2)`: system-wide on the request's CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyscallOpener;

impl CounterOpener for SyscallOpener {
    fn open(&self, request: &CounterRequest) -> io::Result<Box<dyn CounterReader>> {
        use perf_event_open_sys::bindings::{PERF_FLAG_FD_CLOEXEC, perf_event_attr};
        let mut attr = perf_event_attr {
            type_: request.pmu_type,
            size: std::mem::size_of::<perf_event_attr>() as u32,
            config: request.config,
            ..perf_event_attr::default()
        };
        // SAFETY: attr is a valid, fully initialised perf_event_attr whose size field matches
        // the struct; the kernel only reads it. pid -1 with a CPU counts system-wide there.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(
                &mut attr,
                -1,
                request.cpu as i32,
                -1,
                PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            let err = io::Error::last_os_error();
            if matches!(err.raw_os_error(), Some(libc::EACCES | libc::EPERM)) {
                let paranoid = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .map(|s| format!(" (kernel.perf_event_paranoid is {})", s.trim()))
                    .unwrap_or_default();
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("{err}{paranoid}"),
                ));
            }
            return Err(err);
        }
        // SAFETY: fd is a new descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(Box::new(StreamCounter(file)))
    }
}

/// Reads counters from files `DIR/<pmu>/<event>/cpu<N>` (8-byte native-endian counts at
/// offset 0) instead of perf events: `--perf-counters-from DIR`, for end-to-end tests and
/// benchmarks on machines without RAPL. Everything else is the production path.
#[derive(Clone, Debug)]
pub struct FileOpener {
    pub dir: PathBuf,
}

impl CounterOpener for FileOpener {
    fn open(&self, request: &CounterRequest) -> io::Result<Box<dyn CounterReader>> {
        let path = self
            .dir
            .join(&request.pmu)
            .join(&request.event)
            .join(format!("cpu{}", request.cpu));
        let file = File::open(&path)
            .map_err(|err| io::Error::new(err.kind(), format!("{}: {err}", path.display())))?;
        Ok(Box::new(FileCounter(file)))
    }
}

/// The largest `.scale` accepted, in joules per count: RAPL counts in 2^-32 J (15.3 µJ on
/// older AMD parts); at 1 J a full 64-bit count is still a finite number of joules.
const MAX_SCALE_J: f64 = 1.0;

/// An event of a PMU as sysfs describes it.
#[derive(Clone, Debug, PartialEq)]
struct Event {
    name: String,
    config: u64,
    /// Joules per count.
    scale_j: f64,
}

/// A PMU as sysfs describes it.
#[derive(Clone, Debug, PartialEq)]
struct Pmu {
    name: &'static str,
    pmu_type: u32,
    cpus: Vec<u32>,
    events: Vec<Event>,
}

/// A domain and the counters whose sum it is.
#[derive(Clone, Debug, PartialEq)]
struct PlannedDomain {
    spec: DomainSpec,
    counters: Vec<(CounterRequest, f64)>,
}

struct OpenCounter {
    what: String,
    reader: Box<dyn CounterReader>,
    /// Counts, judged against the domain's power bound.
    counter: CheckedCounter,
}

/// RAPL through perf events.
pub struct PerfSource {
    root: PathBuf,
    domains: Vec<DomainSpec>,
    /// Per domain, the counters it sums.
    counters: Vec<Vec<OpenCounter>>,
    /// Per domain: whether its counter is frozen (`None` for uncore, whose energy does not
    /// follow the CPUs).
    freeze: Vec<Option<FreezeWatch>>,
    /// The first glitch of each kind per domain, described, for the report's notes.
    first_glitches: Vec<(usize, Glitch, String)>,
}

impl std::fmt::Debug for PerfSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfSource")
            .field("root", &self.root)
            .field("domains", &self.domains)
            .finish_non_exhaustive()
    }
}

impl PerfSource {
    /// Discovers the RAPL PMUs under `root`, opens every counter with `opener` and takes the
    /// first reading (so the first [`EnergySource::read`] returns the energy since opening).
    pub fn open(
        root: &Path,
        host: &HostInfo,
        opener: &dyn CounterOpener,
    ) -> Result<Self, SourceError> {
        let planned = discover(root, host)?;
        let mut domains = Vec::new();
        let mut counters = Vec::new();
        for domain in planned {
            let mut opened = Vec::new();
            for (request, scale_j) in &domain.counters {
                let what = request.describe();
                let mut reader = opener
                    .open(request)
                    .map_err(|err| open_error(&what, &err))?;
                let first = reader.read_count().map_err(|err| SourceError::PerfFailed {
                    what: what.clone(),
                    reason: format!("first read failed: {err}"),
                })?;
                let mut counter =
                    CheckedCounter::new(u64::MAX, *scale_j, counter::max_power_w(domain.spec.kind));
                counter.reset(first);
                opened.push(OpenCounter {
                    what,
                    reader,
                    counter,
                });
            }
            domains.push(domain.spec);
            counters.push(opened);
        }
        Ok(PerfSource {
            root: root.to_path_buf(),
            freeze: domains
                .iter()
                .map(|d| (d.kind != DomainKind::Uncore).then(FreezeWatch::default))
                .collect(),
            domains,
            counters,
            first_glitches: Vec::new(),
        })
    }
}

impl EnergySource for PerfSource {
    fn name(&self) -> &'static str {
        "perf"
    }

    fn provenance(&self) -> Provenance {
        Provenance::Measured
    }

    fn domains(&self) -> &[DomainSpec] {
        &self.domains
    }

    fn read(&mut self, ctx: &ReadContext<'_>) -> Result<Vec<Reading>, SourceError> {
        // Every count first: a failed read leaves every counter where it was, so the next
        // good read brings this interval's energy for all of them.
        let mut counts = Vec::with_capacity(self.counters.len());
        for counters in &mut self.counters {
            let mut domain = Vec::with_capacity(counters.len());
            for c in counters.iter_mut() {
                domain.push(
                    c.reader
                        .read_count()
                        .map_err(|err| SourceError::PerfFailed {
                            what: c.what.clone(),
                            reason: format!("read failed: {err}"),
                        })?,
                );
            }
            counts.push(domain);
        }
        let mut readings = Vec::with_capacity(self.counters.len());
        for (d, (counters, counts)) in self.counters.iter_mut().zip(counts).enumerate() {
            let mut joules = 0.0;
            let mut glitch = None;
            for (c, count) in counters.iter_mut().zip(counts) {
                match c.counter.advance(count, ctx.duration_ns) {
                    Ok(j) => joules += j,
                    Err((g, judged)) => {
                        if !self
                            .first_glitches
                            .iter()
                            .any(|(x, y, _)| (*x, *y) == (d, g))
                        {
                            let implied_w = judged.joules / (ctx.duration_ns.max(1) as f64 / 1e9);
                            self.first_glitches.push((
                                d,
                                g,
                                format!(
                                    "perf {}: {} went from {} to {} counts in {} (as an advance: \
                                     {:.0} J, {}; at most {:.0} W is plausible)",
                                    self.domains[d].name,
                                    c.what,
                                    judged.previous,
                                    judged.value,
                                    human_duration(ctx.duration_ns),
                                    judged.joules,
                                    human_power(implied_w),
                                    c.counter.max_power_w()
                                ),
                            ));
                        }
                        glitch.get_or_insert(g);
                    }
                }
            }
            let freeze = &mut self.freeze[d];
            readings.push(match (glitch, freeze.as_mut()) {
                (Some(g), f) => {
                    if let Some(f) = f {
                        f.interrupt();
                    }
                    Reading::unknown(g)
                }
                (None, Some(f)) => {
                    let reading =
                        f.observe(joules, ctx.duration_ns, busy_cpus(ctx, &self.domains[d].coverage));
                    if let Reading::Unknown(u) = reading
                        && !self.first_glitches.iter().any(|(x, y, _)| (*x, *y) == (d, u.glitch))
                    {
                        self.first_glitches.push((
                            d,
                            u.glitch,
                            format!(
                                "perf {}: its counters stopped while its CPUs were busy (found frozen \
                                 after {})",
                                self.domains[d].name,
                                human_duration(u.earlier_ns + ctx.duration_ns)
                            ),
                        ));
                    }
                    reading
                }
                (None, None) => Reading::Joules(joules),
            });
        }
        Ok(readings)
    }

    fn summary(&self) -> SourceSummary {
        SourceSummary {
            notes: self
                .first_glitches
                .iter()
                .map(|(_, _, text)| SourceNote::info(format!("first glitch: {text}")))
                .collect(),
            ..SourceSummary::default()
        }
    }

    fn describe(&self) -> String {
        let count: usize = self.counters.iter().map(Vec::len).sum();
        format!(
            "RAPL energy counters through the perf power PMU under {} ({count} counters, {} \
             domains)",
            self.root.display(),
            self.domains.len()
        )
    }
}

/// The domains the PMUs under `root` offer, without opening any counter (`cg-trace sources`
/// lists them even when opening needs privileges).
pub fn discover_domains(root: &Path, host: &HostInfo) -> Result<Vec<DomainSpec>, SourceError> {
    Ok(discover(root, host)?.into_iter().map(|d| d.spec).collect())
}

fn open_error(what: &str, err: &io::Error) -> SourceError {
    if err.kind() == io::ErrorKind::PermissionDenied {
        SourceError::PerfDenied {
            what: what.to_string(),
            reason: err.to_string(),
        }
    } else {
        SourceError::PerfFailed {
            what: what.to_string(),
            reason: format!("cannot open: {err}"),
        }
    }
}

/// Reads both PMUs and plans the domains and their counters.
fn discover(root: &Path, host: &HostInfo) -> Result<Vec<PlannedDomain>, SourceError> {
    let power = read_pmu(root, "power")?;
    let power_core = read_pmu(root, "power_core")?;
    if power.is_none() && power_core.is_none() {
        return Err(SourceError::PerfMissing {
            root: root.to_path_buf(),
        });
    }
    let spec = |name: String, kind, parent, coverage| DomainSpec {
        name,
        kind,
        parent,
        coverage,
        provenance: Provenance::Measured,
        source: "perf",
    };
    let mut planned: Vec<PlannedDomain> = Vec::new();
    if let Some(pmu) = &power {
        let event = |name: &str| pmu.events.iter().find(|e| e.name == name);
        let psys = event("energy-psys");
        let psys_parent = psys.map(|_| "psys".to_string());
        for (cpu, package, suffix) in package_cpus(&pmu.cpus, host) {
            let coverage = Coverage::Cpus(host.cpus_of_package(package));
            let package_name = format!("package{suffix}");
            let has_package = event("energy-pkg").is_some();
            let inside_package = has_package.then(|| package_name.clone());
            let rows = [
                (
                    "energy-pkg",
                    package_name.clone(),
                    DomainKind::Package,
                    psys_parent.clone(),
                ),
                (
                    "energy-cores",
                    format!("core{suffix}"),
                    DomainKind::Core,
                    inside_package.clone(),
                ),
                (
                    "energy-gpu",
                    format!("uncore{suffix}"),
                    DomainKind::Uncore,
                    inside_package.clone(),
                ),
                (
                    "energy-ram",
                    format!("dram{suffix}"),
                    DomainKind::Dram,
                    psys_parent.clone(),
                ),
            ];
            for (event_name, name, kind, parent) in rows {
                if let Some(e) = event(event_name) {
                    planned.push(PlannedDomain {
                        spec: spec(name, kind, parent, coverage.clone()),
                        counters: vec![(request(pmu, e, cpu), e.scale_j)],
                    });
                }
            }
        }
        if let (Some(e), Some(&cpu)) = (psys, pmu.cpus.first()) {
            // One platform counter: read it once, not once per package.
            planned.push(PlannedDomain {
                spec: spec("psys".into(), DomainKind::Psys, None, Coverage::AllCpus),
                counters: vec![(request(pmu, e, cpu), e.scale_j)],
            });
        }
        for e in &pmu.events {
            if !matches!(
                e.name.as_str(),
                "energy-pkg" | "energy-cores" | "energy-gpu" | "energy-ram" | "energy-psys"
            ) {
                tracing::debug!("perf: ignoring unknown RAPL event power/{}", e.name);
            }
        }
    }
    if let Some(pmu) = &power_core
        && let Some(e) = pmu.events.iter().find(|e| e.name == "energy-core")
    {
        // Per-core counters, summed per package into core-N inside package-N.
        let mut per_package: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &cpu in &pmu.cpus {
            per_package
                .entry(package_of(cpu, host))
                .or_default()
                .push(cpu);
        }
        for (package, cpus) in per_package {
            let name = format!("core-{package}");
            if planned.iter().any(|d| d.spec.name == name) {
                continue; // the power PMU's energy-cores already measures it
            }
            let package_name = format!("package-{package}");
            let parent = planned
                .iter()
                .any(|d| d.spec.name == package_name)
                .then_some(package_name);
            planned.push(PlannedDomain {
                spec: spec(
                    name,
                    DomainKind::Core,
                    parent,
                    Coverage::Cpus(host.cpus_of_package(package)),
                ),
                counters: cpus
                    .into_iter()
                    .map(|cpu| (request(pmu, e, cpu), e.scale_j))
                    .collect(),
            });
        }
    }
    if planned.is_empty() {
        return Err(SourceError::PerfMissing {
            root: root.to_path_buf(),
        });
    }
    Ok(planned)
}

fn request(pmu: &Pmu, event: &Event, cpu: u32) -> CounterRequest {
    CounterRequest {
        pmu: pmu.name.to_string(),
        event: event.name.clone(),
        pmu_type: pmu.pmu_type,
        config: event.config,
        cpu,
    }
}

fn package_of(cpu: u32, host: &HostInfo) -> u32 {
    host.cpu_packages.get(cpu as usize).copied().unwrap_or(0)
}

/// For each CPU of a package PMU's cpumask: (cpu, package, name suffix). The suffix is `-P`,
/// or `-P-die-D` when the mask lists several CPUs of one package (one per die).
fn package_cpus(cpus: &[u32], host: &HostInfo) -> Vec<(u32, u32, String)> {
    let mut per_package: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &cpu in cpus {
        per_package
            .entry(package_of(cpu, host))
            .or_default()
            .push(cpu);
    }
    let mut out = Vec::new();
    for (package, cpus) in per_package {
        let dies = cpus.len();
        for (die, cpu) in cpus.into_iter().enumerate() {
            let suffix = if dies > 1 {
                format!("-{package}-die-{die}")
            } else {
                format!("-{package}")
            };
            out.push((cpu, package, suffix));
        }
    }
    out
}

/// Reads one PMU's directory; `None` when it does not exist.
fn read_pmu(root: &Path, name: &'static str) -> Result<Option<Pmu>, SourceError> {
    let dir = root.join(name);
    if !dir.is_dir() {
        return Ok(None);
    }
    let type_path = dir.join("type");
    let pmu_type: u32 = read_text(&type_path)?
        .parse()
        .map_err(|_| malformed(&type_path, "expected the PMU type, an unsigned integer"))?;
    let mask_path = dir.join("cpumask");
    let cpus = parse_cpu_list(&read_text(&mask_path)?)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| malformed(&mask_path, "expected a CPU list such as 0,4"))?;
    let formats = read_formats(&dir.join("format"))?;
    let events_dir = dir.join("events");
    let entries = fs::read_dir(&events_dir)
        .map_err(|err| malformed(&events_dir, &format!("cannot list the PMU's events: {err}")))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with("energy-") && !n.contains('.'))
        .collect();
    names.sort();
    let mut events = Vec::new();
    for event in names {
        let path = events_dir.join(&event);
        let config =
            parse_config(&read_text(&path)?, &formats).map_err(|r| malformed(&path, &r))?;
        let scale_path = events_dir.join(format!("{event}.scale"));
        let scale_j: f64 = read_text(&scale_path)?
            .parse()
            .ok()
            .filter(|s: &f64| *s > 0.0 && *s <= MAX_SCALE_J)
            .ok_or_else(|| {
                malformed(
                    &scale_path,
                    "expected a positive number of joules per count, at most 1",
                )
            })?;
        let unit_path = events_dir.join(format!("{event}.unit"));
        if unit_path.exists() {
            let unit = read_text(&unit_path)?;
            if !unit.eq_ignore_ascii_case("joules") {
                return Err(malformed(
                    &unit_path,
                    &format!("unit {unit:?}, expected Joules"),
                ));
            }
        }
        events.push(Event {
            name: event,
            config,
            scale_j,
        });
    }
    Ok(Some(Pmu {
        name,
        pmu_type,
        cpus,
        events,
    }))
}

/// `format/<term>` files: term -> lowest bit of `config` it occupies. Without a format
/// directory, `event` is bits 0-63 of `config`, as for every RAPL PMU so far.
fn read_formats(dir: &Path) -> Result<BTreeMap<String, u32>, SourceError> {
    let mut formats = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        formats.insert("event".to_string(), 0);
        return Ok(formats);
    };
    for entry in entries.flatten() {
        let Some(term) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let path = entry.path();
        let text = read_text(&path)?;
        // "config:0-7" or "config:8"; fields other than config are not used by RAPL.
        let Some(bits) = text.strip_prefix("config:") else {
            continue;
        };
        let low: u32 = bits
            .split('-')
            .next()
            .and_then(|b| b.trim().parse().ok())
            .filter(|b| *b < 64)
            .ok_or_else(|| malformed(&path, "expected config:LOW-HIGH"))?;
        formats.insert(term, low);
    }
    Ok(formats)
}

/// `event=0x02[,umask=0x1]` -> the `config` value.
fn parse_config(text: &str, formats: &BTreeMap<String, u32>) -> Result<u64, String> {
    let mut config = 0u64;
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (name, value) = term.split_once('=').unwrap_or((term, "1"));
        let value = value.trim();
        let value = match value
            .strip_prefix("0x")
            .or_else(|| value.strip_prefix("0X"))
        {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => value.parse(),
        }
        .map_err(|_| format!("term {term:?}: expected a number"))?;
        let shift = formats
            .get(name.trim())
            .ok_or_else(|| format!("term {name:?} is not in the PMU's format"))?;
        config |= value << shift;
    }
    Ok(config)
}

fn read_text(path: &Path) -> Result<String, SourceError> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|err| match err.kind() {
            io::ErrorKind::NotFound => malformed(path, "missing"),
            _ => malformed(path, &format!("cannot read: {err}")),
        })
}

fn malformed(path: &Path, reason: &str) -> SourceError {
    SourceError::PerfMalformed {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::{
        cell::RefCell,
        io::{PipeWriter, Write},
        rc::Rc,
    };

    use super::*;

    /// 2^-32 J, the usual RAPL scale.
    const SCALE: &str = "2.3283064365386962890625e-10";
    const COUNTS_PER_J: u64 = 1 << 32;

    fn host(packages: &[u32]) -> HostInfo {
        HostInfo {
            hostname: "h".into(),
            kernel: "k".into(),
            cpu_model: "m".into(),
            cpu_packages: packages.to_vec(),
        }
    }

    fn joules(readings: &[Reading]) -> Vec<f64> {
        readings
            .iter()
            .map(|r| r.joules().unwrap_or_else(|| panic!("{readings:?}")))
            .collect()
    }

    fn ctx() -> ReadContext<'static> {
        ReadContext {
            duration_ns: 100_000_000,
            busy_ns_per_cpu: &[],
            wall_start_ns: 0,
            wall_end_ns: 100_000_000,
        }
    }

    /// Writes a PMU directory with the given events (name, event code).
    fn pmu(root: &Path, name: &str, pmu_type: u32, cpumask: &str, events: &[(&str, u32)]) {
        let dir = root.join(name);
        fs::create_dir_all(dir.join("events")).unwrap();
        fs::create_dir_all(dir.join("format")).unwrap();
        fs::write(dir.join("type"), format!("{pmu_type}\n")).unwrap();
        fs::write(dir.join("cpumask"), format!("{cpumask}\n")).unwrap();
        fs::write(dir.join("format/event"), "config:0-7\n").unwrap();
        for (event, code) in events {
            let e = dir.join("events");
            fs::write(e.join(event), format!("event=0x{code:02x}\n")).unwrap();
            fs::write(e.join(format!("{event}.scale")), format!("{SCALE}\n")).unwrap();
            fs::write(e.join(format!("{event}.unit")), "Joules\n").unwrap();
        }
    }

    fn intel_two_sockets(root: &Path) {
        pmu(
            root,
            "power",
            23,
            "0,2",
            &[
                ("energy-cores", 1),
                ("energy-pkg", 2),
                ("energy-ram", 3),
                ("energy-psys", 5),
            ],
        );
    }

    /// An opener that hands out pipes; the test writes counts into them.
    #[derive(Clone, Default)]
    struct Pipes(Rc<RefCell<Vec<(CounterRequest, PipeWriter)>>>);

    impl Pipes {
        fn opener(&self) -> impl Fn(&CounterRequest) -> io::Result<Box<dyn CounterReader>> {
            let pipes = self.0.clone();
            move |request: &CounterRequest| {
                let (reader, mut writer) = io::pipe()?;
                // The source takes a first reading at once: the counter starts at 1000.
                writer.write_all(&1000u64.to_ne_bytes())?;
                pipes.borrow_mut().push((request.clone(), writer));
                Ok(Box::new(StreamCounter(reader)) as Box<dyn CounterReader>)
            }
        }

        /// Feeds the next count of every counter, as `f(request)`.
        fn feed(&self, f: impl Fn(&CounterRequest) -> u64) {
            for (request, writer) in self.0.borrow_mut().iter_mut() {
                writer.write_all(&f(request).to_ne_bytes()).unwrap();
            }
        }

        fn requests(&self) -> Vec<CounterRequest> {
            self.0.borrow().iter().map(|(r, _)| r.clone()).collect()
        }
    }

    #[test]
    fn maps_intel_events_to_the_powercap_domain_names_and_nesting() {
        let dir = tempfile::tempdir().unwrap();
        intel_two_sockets(dir.path());
        let domains = discover_domains(dir.path(), &host(&[0, 0, 1, 1])).unwrap();
        let by_name = |n: &str| domains.iter().find(|d| d.name == n).unwrap();
        let names: Vec<_> = domains.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "package-0",
                "core-0",
                "dram-0",
                "package-1",
                "core-1",
                "dram-1",
                "psys"
            ]
        );
        assert_eq!(by_name("core-1").parent.as_deref(), Some("package-1"));
        assert_eq!(by_name("core-1").kind, DomainKind::Core);
        assert_eq!(by_name("package-0").parent.as_deref(), Some("psys"));
        assert_eq!(by_name("dram-0").parent.as_deref(), Some("psys"));
        assert_eq!(by_name("psys").parent, None);
        assert_eq!(by_name("dram-1").coverage, Coverage::Cpus(vec![2, 3]));
        assert_eq!(by_name("psys").coverage, Coverage::AllCpus);
        assert!(domains.iter().all(|d| d.source == "perf"));
    }

    #[test]
    fn opens_one_counter_per_package_on_the_cpumask_cpu() {
        let dir = tempfile::tempdir().unwrap();
        intel_two_sockets(dir.path());
        let pipes = Pipes::default();
        let opener = pipes.opener();
        PerfSource::open(dir.path(), &host(&[0, 0, 1, 1]), &opener).unwrap();
        let requests = pipes.requests();
        let pkg: Vec<_> = requests
            .iter()
            .filter(|r| r.event == "energy-pkg")
            .map(|r| (r.cpu, r.pmu_type, r.config))
            .collect();
        assert_eq!(pkg, [(0, 23, 2), (2, 23, 2)]);
        // psys is a single platform counter.
        assert_eq!(
            requests.iter().filter(|r| r.event == "energy-psys").count(),
            1
        );
    }

    #[test]
    fn scales_64_bit_counts_to_joules() {
        let dir = tempfile::tempdir().unwrap();
        pmu(dir.path(), "power", 9, "0", &[("energy-pkg", 2)]);
        let pipes = Pipes::default();
        let opener = pipes.opener();
        let mut source = PerfSource::open(dir.path(), &host(&[0, 0]), &opener).unwrap();
        // 2.5 J worth of counts since the first reading of 1000.
        pipes.feed(|_| 1000 + 5 * COUNTS_PER_J / 2);
        let j = joules(&source.read(&ctx()).unwrap());
        assert!((j[0] - 2.5).abs() < 1e-9, "{j:?}");
        pipes.feed(|_| 1000 + 3 * COUNTS_PER_J);
        let j = joules(&source.read(&ctx()).unwrap());
        assert!((j[0] - 0.5).abs() < 1e-9, "{j:?}");
    }

    #[test]
    fn counter_wraparound_at_64_bits_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        pmu(dir.path(), "power", 9, "0", &[("energy-pkg", 2)]);
        let writer: Rc<RefCell<Option<PipeWriter>>> = Rc::default();
        let w = writer.clone();
        let opener = move |_: &CounterRequest| {
            let (reader, mut writer) = io::pipe()?;
            writer.write_all(&(u64::MAX - COUNTS_PER_J + 1).to_ne_bytes())?;
            *w.borrow_mut() = Some(writer);
            Ok(Box::new(StreamCounter(reader)) as Box<dyn CounterReader>)
        };
        let mut source = PerfSource::open(dir.path(), &host(&[0]), &opener).unwrap();
        // One joule up to the wrap, then one more after it.
        writer
            .borrow_mut()
            .as_mut()
            .unwrap()
            .write_all(&COUNTS_PER_J.to_ne_bytes())
            .unwrap();
        let j = joules(&source.read(&ctx()).unwrap())[0];
        assert!((j - 2.0).abs() < 1e-6, "{j}");
    }

    /// A 100 ms interval during which CPUs 0 and 1 (package 0) were busy.
    fn busy_ctx() -> ReadContext<'static> {
        static BUSY: [u64; 2] = [100_000_000, 100_000_000];
        ReadContext {
            busy_ns_per_cpu: &BUSY,
            ..ctx()
        }
    }

    #[test]
    fn a_step_back_of_a_64_bit_counter_is_unknown_energy_and_the_run_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        pmu(
            dir.path(),
            "power",
            9,
            "0",
            &[("energy-pkg", 2), ("energy-ram", 3)],
        );
        let pipes = Pipes::default();
        let opener = pipes.opener();
        let mut source = PerfSource::open(dir.path(), &host(&[0, 0]), &opener).unwrap();
        pipes.feed(|_| 1000 + 10 * COUNTS_PER_J);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![10.0, 10.0]);
        // The package counter steps back by 1 J (as a wraparound: 2^64 counts, 4 GJ); DRAM
        // moves on.
        pipes.feed(|r| match r.event.as_str() {
            "energy-pkg" => 1000 + 9 * COUNTS_PER_J,
            _ => 1000 + 11 * COUNTS_PER_J,
        });
        let r = source.read(&busy_ctx()).unwrap();
        assert_eq!(
            r,
            vec![Reading::unknown(Glitch::StepBack), Reading::Joules(1.0)]
        );
        pipes.feed(|r| match r.event.as_str() {
            "energy-pkg" => 1000 + 11 * COUNTS_PER_J,
            _ => 1000 + 12 * COUNTS_PER_J,
        });
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![2.0, 1.0]);
        let notes = source.summary().notes;
        assert!(
            notes
                .iter()
                .any(|n| n.text.contains("package-0") && n.text.contains("from")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_jump_beyond_what_a_package_can_draw_is_unknown_energy() {
        let dir = tempfile::tempdir().unwrap();
        pmu(dir.path(), "power", 9, "0", &[("energy-pkg", 2)]);
        let pipes = Pipes::default();
        let opener = pipes.opener();
        let mut source = PerfSource::open(dir.path(), &host(&[0, 0]), &opener).unwrap();
        // +1000 J in 100 ms: 10 kW.
        pipes.feed(|_| 1000 + 1000 * COUNTS_PER_J);
        assert_eq!(
            source.read(&busy_ctx()).unwrap(),
            vec![Reading::unknown(Glitch::Jump)]
        );
        pipes.feed(|_| 1000 + 1001 * COUNTS_PER_J);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![1.0]);
    }

    #[test]
    fn counters_that_stop_while_their_cpus_are_busy_are_frozen() {
        let dir = tempfile::tempdir().unwrap();
        pmu(
            dir.path(),
            "power",
            9,
            "0",
            &[("energy-pkg", 2), ("energy-gpu", 4)],
        );
        let pipes = Pipes::default();
        let opener = pipes.opener();
        let mut source = PerfSource::open(dir.path(), &host(&[0, 0]), &opener).unwrap();
        for _ in 0..2 {
            pipes.feed(|_| 1000);
            assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![0.0, 0.0]);
        }
        pipes.feed(|_| 1000);
        let r = source.read(&busy_ctx()).unwrap();
        assert_eq!(
            r[0],
            Reading::Unknown(crate::sources::Unknown {
                glitch: Glitch::Frozen,
                earlier_count: 2,
                earlier_ns: 200_000_000,
            })
        );
        // An idle integrated GPU (uncore) does not move with the CPUs: 0 J is fine there.
        assert_eq!(r[1], Reading::Joules(0.0));
    }

    #[test]
    fn a_failed_read_moves_no_counter_so_the_next_one_brings_the_energy() {
        let dir = tempfile::tempdir().unwrap();
        pmu(
            dir.path(),
            "power",
            9,
            "0",
            &[("energy-pkg", 2), ("energy-ram", 3)],
        );
        // The package counter answers; the DRAM one fails once (its pipe is empty).
        let writers: Rc<RefCell<Vec<(String, PipeWriter)>>> = Rc::default();
        let w = writers.clone();
        let opener = move |request: &CounterRequest| {
            let (reader, mut writer) = io::pipe()?;
            writer.write_all(&0u64.to_ne_bytes())?;
            w.borrow_mut().push((request.event.clone(), writer));
            Ok(Box::new(FailOnEmpty(reader)) as Box<dyn CounterReader>)
        };
        let mut source = PerfSource::open(dir.path(), &host(&[0, 0]), &opener).unwrap();
        let feed = |event: &str, count: u64| {
            for (e, writer) in writers.borrow_mut().iter_mut() {
                if e == event {
                    writer.write_all(&count.to_ne_bytes()).unwrap();
                }
            }
        };
        feed("energy-pkg", 2 * COUNTS_PER_J);
        let err = source.read(&busy_ctx()).unwrap_err();
        assert!(err.to_string().contains("energy-ram"), "{err}");
        feed("energy-pkg", 3 * COUNTS_PER_J);
        feed("energy-ram", COUNTS_PER_J);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![3.0, 1.0]);
    }

    /// A pipe reader that fails instead of blocking when nothing was written.
    struct FailOnEmpty(io::PipeReader);

    impl CounterReader for FailOnEmpty {
        fn read_count(&mut self) -> io::Result<u64> {
            use std::os::fd::AsRawFd;
            let mut available: libc::c_int = 0;
            // SAFETY: FIONREAD writes the number of readable bytes into `available`.
            unsafe { libc::ioctl(self.0.as_raw_fd(), libc::FIONREAD, &mut available) };
            if available < 8 {
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "no count"));
            }
            StreamCounter(&mut self.0).read_count()
        }
    }

    #[test]
    fn amd_per_core_counters_are_summed_into_core_n_inside_the_package() {
        // One package of 4 CPUs (2 cores x 2 threads): energy-pkg on `power`, energy-core on
        // `power_core` with one CPU per core.
        let dir = tempfile::tempdir().unwrap();
        pmu(dir.path(), "power", 11, "0", &[("energy-pkg", 2)]);
        pmu(dir.path(), "power_core", 12, "0,2", &[("energy-core", 1)]);
        let pipes = Pipes::default();
        let opener = pipes.opener();
        let mut source = PerfSource::open(dir.path(), &host(&[0, 0, 0, 0]), &opener).unwrap();
        let names: Vec<_> = source.domains().iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["package-0", "core-0"]);
        assert_eq!(source.domains()[1].parent.as_deref(), Some("package-0"));
        let core_cpus: Vec<_> = pipes
            .requests()
            .iter()
            .filter(|r| r.pmu == "power_core")
            .map(|r| (r.cpu, r.pmu_type))
            .collect();
        assert_eq!(core_cpus, [(0, 12), (2, 12)]);
        // Package 3 J; core on CPU 0: 1 J, core on CPU 2: 0.5 J -> core-0 1.5 J.
        pipes.feed(|r| match (r.pmu.as_str(), r.cpu) {
            ("power", _) => 1000 + 3 * COUNTS_PER_J,
            (_, 0) => 1000 + COUNTS_PER_J,
            _ => 1000 + COUNTS_PER_J / 2,
        });
        let j = joules(&source.read(&ctx()).unwrap());
        assert!(
            (j[0] - 3.0).abs() < 1e-9 && (j[1] - 1.5).abs() < 1e-9,
            "{j:?}"
        );
    }

    #[test]
    fn reads_counters_from_files_through_the_file_opener() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path().join("sysfs");
        let counters = dir.path().join("counters");
        pmu(
            &sysfs,
            "power",
            9,
            "0",
            &[("energy-pkg", 2), ("energy-ram", 3)],
        );
        let write = |event: &str, count: u64| {
            let d = counters.join("power").join(event);
            fs::create_dir_all(&d).unwrap();
            // In place, as the end-to-end helper does: the source keeps the file open.
            let f = fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .open(d.join("cpu0"))
                .unwrap();
            f.write_all_at(&count.to_ne_bytes(), 0).unwrap();
        };
        write("energy-pkg", 0);
        write("energy-ram", 0);
        let opener = FileOpener {
            dir: counters.clone(),
        };
        let mut source = PerfSource::open(&sysfs, &host(&[0]), &opener).unwrap();
        write("energy-pkg", 4 * COUNTS_PER_J);
        write("energy-ram", COUNTS_PER_J);
        assert_eq!(joules(&source.read(&ctx()).unwrap()), vec![4.0, 1.0]);
    }

    #[test]
    fn refused_open_says_which_privileges_are_missing() {
        let dir = tempfile::tempdir().unwrap();
        pmu(dir.path(), "power", 9, "0", &[("energy-pkg", 2)]);
        let opener = |_: &CounterRequest| -> io::Result<Box<dyn CounterReader>> {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "Permission denied (os error 13)",
            ))
        };
        let err = PerfSource::open(dir.path(), &host(&[0]), &opener).unwrap_err();
        assert!(err.needs_privileges(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("power/energy-pkg/ on CPU 0") && text.contains("CAP_PERFMON"),
            "{text}"
        );
        // Any other failure is not a privilege problem.
        let opener = |_: &CounterRequest| -> io::Result<Box<dyn CounterReader>> {
            Err(io::Error::from_raw_os_error(libc::ENODEV))
        };
        let err = PerfSource::open(dir.path(), &host(&[0]), &opener).unwrap_err();
        assert!(!err.needs_privileges(), "{err}");
    }

    #[test]
    fn missing_pmu_says_there_is_no_rapl() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("cpu")).unwrap();
        let err = discover_domains(dir.path(), &host(&[0])).unwrap_err();
        assert!(matches!(err, SourceError::PerfMissing { .. }), "{err}");
        // A power PMU without energy events is no RAPL either.
        pmu(dir.path(), "power", 9, "0", &[]);
        let err = discover_domains(dir.path(), &host(&[0])).unwrap_err();
        assert!(matches!(err, SourceError::PerfMissing { .. }), "{err}");
    }

    #[test]
    fn malformed_trees_name_the_file_at_fault() {
        let check = |mutate: &dyn Fn(&Path), needle: &str| {
            let dir = tempfile::tempdir().unwrap();
            pmu(dir.path(), "power", 9, "0", &[("energy-pkg", 2)]);
            mutate(&dir.path().join("power"));
            let err = discover_domains(dir.path(), &host(&[0])).unwrap_err();
            assert!(
                matches!(err, SourceError::PerfMalformed { .. }),
                "{needle}: {err}"
            );
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        };
        check(&|d| fs::write(d.join("type"), "rapl\n").unwrap(), "type");
        check(&|d| fs::write(d.join("cpumask"), "\n").unwrap(), "cpumask");
        check(
            &|d| fs::remove_file(d.join("events/energy-pkg.scale")).unwrap(),
            "energy-pkg.scale",
        );
        check(
            &|d| fs::write(d.join("events/energy-pkg.scale"), "-1\n").unwrap(),
            "positive",
        );
        check(
            &|d| fs::write(d.join("events/energy-pkg.unit"), "mJ\n").unwrap(),
            "Joules",
        );
        check(
            &|d| fs::write(d.join("events/energy-pkg"), "event=zz\n").unwrap(),
            "expected a number",
        );
        check(
            &|d| fs::write(d.join("events/energy-pkg"), "umask=0x1\n").unwrap(),
            "format",
        );
    }

    /// The `perf_tree` fuzz target's property check: a `.scale` of 1e300 J per count made a
    /// full-range count infinite joules.
    #[test]
    fn a_scale_no_rapl_counter_has_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let tree =
            include_str!("../../../fuzz/regressions/perf_tree/scale-1e300-reads-infinite-joules");
        for (path, value) in tree.lines().filter_map(|l| l.split_once('=')) {
            if let Some(path) = path.strip_prefix("!") {
                assert_eq!(path, "counts");
                continue;
            }
            let path = dir.path().join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, format!("{value}\n")).unwrap();
        }
        let counts = std::cell::Cell::new([0, u64::MAX].into_iter());
        let opener = |_: &CounterRequest| -> io::Result<Box<dyn CounterReader>> {
            let mut bytes: Vec<u8> = Vec::new();
            for count in counts.take() {
                bytes.extend(count.to_ne_bytes());
            }
            Ok(Box::new(StreamCounter(io::Cursor::new(bytes))))
        };
        let err = PerfSource::open(dir.path(), &host(&[0]), &opener)
            .and_then(|mut source| source.read(&ctx()))
            .unwrap_err();
        assert!(err.to_string().contains("energy-pkg.scale"), "{err}");
    }

    #[test]
    fn event_terms_are_placed_where_the_format_says() {
        let mut formats = BTreeMap::new();
        formats.insert("event".to_string(), 0);
        formats.insert("umask".to_string(), 8);
        assert_eq!(parse_config("event=0x02", &formats), Ok(2));
        assert_eq!(parse_config("event=0x02,umask=0x1", &formats), Ok(0x102));
        assert_eq!(parse_config("event=3", &formats), Ok(3));
    }

    #[test]
    fn dies_of_one_package_get_their_own_domains() {
        let dir = tempfile::tempdir().unwrap();
        pmu(dir.path(), "power", 9, "0,1", &[("energy-pkg", 2)]);
        let domains = discover_domains(dir.path(), &host(&[0, 0])).unwrap();
        let names: Vec<_> = domains.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["package-0-die-0", "package-0-die-1"]);
    }
}
