//! Which sources a run uses, and why: the one place the rules live, shared by a run
//! ([`select`]) and by `cg-trace sources` ([`probe_all`]).
//!
//! - The machine's CPU-side energy: `--source auto` takes RAPL through the perf `power` PMU
//!   when its counters open (cheaper reads, no wraparound), else RAPL through powercap, else
//!   the built-in model; when both RAPL interfaces exist, their domains are compared and a
//!   disagreement is reported. `--source perf|powercap|model` insists (an unusable explicit
//!   choice is an error).
//! - NVIDIA GPUs (NVML) are added whenever they can be read, whatever `--source` says
//!   (`--no-gpu` leaves them out); a library named with `--nvml-lib` must work. A GPU's board energy is not part of RAPL's, so `gpuN`
//!   domains are top-level next to `package-N`.
//! - `--power-log FILE` makes the meter the energy truth for the whole machine: `meter` is the
//!   only top-level domain, and every other measured domain (RAPL, GPUs) nests inside it, so
//!   totals count the wall energy once and the others still show where it went. The model
//!   would add an estimate beside a measurement, so `--source model` with a meter is refused.

use std::time::{Duration, Instant};

use super::{
    DomainKind, DomainSpec, EnergySource, GpuActivity, ProbeDomain, ProbeStatus, Provenance,
    ReadContext, Reading, Selection, SourceChoice, SourceError, SourceNote, SourceOptions,
    SourceProbe, SourceSummary, WallSpan, human_duration,
    meter::{self, MeterSource},
    model::ModelSource,
    nvml,
    perf::{self, CounterOpener, FileOpener, PerfSource, SyscallOpener},
    powercap::{self, PowercapSource},
};
use crate::host::HostInfo;

/// A probed source: what the listing says, and the opened source (or why not).
struct Probed {
    probe: SourceProbe,
    source: Result<Box<dyn EnergySource>, SourceError>,
}

impl Probed {
    /// The advance check ([`check_advancing`]) of an opened source. One that fails it is
    /// listed as not usable, and the error saying why is returned; the source itself stays
    /// in `self.source`, for a caller that asked for it by name.
    fn check_advancing(&mut self) -> Option<SourceError> {
        let source = self.source.as_mut().ok()?;
        let err = check_advancing(source.as_mut(), ADVANCE_CHECK).err()?;
        self.probe.status = ProbeStatus::of_error(&err);
        self.probe.usable = false;
        self.probe.needs_privileges = err.needs_privileges();
        self.probe.reason = err.to_string();
        Some(err)
    }

    /// As [`Probed::check_advancing`], dropping a source that fails it (what `auto` does).
    fn drop_unless_advancing(&mut self) {
        if let Some(err) = self.check_advancing() {
            self.source = Err(err);
        }
    }
}

/// How long a CPU is kept busy between the two reads that tell whether a RAPL source's
/// counters advance. Real RAPL counters update about every millisecond, busy or idle.
pub const ADVANCE_CHECK: Duration = Duration::from_millis(100);

/// Reads `source`, keeps this CPU busy for `busy`, and reads it again: an error when none of
/// its domains moved (uncore is left out: an idle integrated GPU may draw nothing). A counter
/// that jumped or stepped back moved; one that is otherwise unknown (a range too small to
/// judge, a replaced file) did not show it; a failed read is the error.
pub fn check_advancing(source: &mut dyn EnergySource, busy: Duration) -> Result<(), SourceError> {
    let ctx = |duration_ns| ReadContext {
        duration_ns,
        busy_ns_per_cpu: &[],
        wall_start_ns: 0,
        wall_end_ns: 0,
    };
    source.read(&ctx(0))?;
    let started = Instant::now();
    while started.elapsed() < busy {
        std::hint::spin_loop();
    }
    let elapsed = started.elapsed();
    let readings = source.read(&ctx(elapsed.as_nanos() as u64))?;
    let watched: Vec<(&DomainSpec, &Reading)> = source
        .domains()
        .iter()
        .zip(&readings)
        .filter(|(d, _)| d.kind != DomainKind::Uncore)
        .collect();
    let moved = |r: &Reading| match r {
        Reading::Joules(j) => *j > 0.0,
        Reading::Pending => false,
        Reading::Unknown(u) => u.glitch.shows_movement(),
    };
    if watched.is_empty() || watched.iter().any(|(_, r)| moved(r)) {
        return Ok(());
    }
    Err(SourceError::NotAdvancing {
        name: source.name(),
        domains: domain_list(watched.iter().map(|(d, _)| d)),
        when: format!(
            "in {} with a CPU kept busy",
            human_duration(elapsed.as_nanos() as u64)
        ),
    })
}

/// `package-0, dram-0`.
fn domain_list<'a>(domains: impl Iterator<Item = &'a &'a DomainSpec>) -> String {
    domains
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn probed(
    name: &'static str,
    provenance: Provenance,
    opened: Result<Box<dyn EnergySource>, SourceError>,
    usable_reason: impl FnOnce(&dyn EnergySource) -> String,
    discovered: impl FnOnce() -> Vec<DomainSpec>,
) -> Probed {
    let probe = match &opened {
        Ok(source) => SourceProbe {
            name,
            provenance,
            domains: source.domains().iter().map(ProbeDomain::from).collect(),
            status: ProbeStatus::Usable,
            usable: true,
            needs_privileges: false,
            reason: usable_reason(source.as_ref()),
        },
        Err(err) => SourceProbe {
            name,
            provenance,
            domains: discovered().iter().map(ProbeDomain::from).collect(),
            status: ProbeStatus::of_error(err),
            usable: false,
            needs_privileges: err.needs_privileges(),
            reason: err.to_string(),
        },
    };
    Probed {
        probe,
        source: opened,
    }
}

fn probe_perf(options: &SourceOptions, host: &HostInfo) -> Probed {
    let opener: Box<dyn CounterOpener> = match &options.perf_counters_from {
        Some(dir) => Box::new(FileOpener { dir: dir.clone() }),
        None => Box::new(SyscallOpener),
    };
    let root = &options.perf_root;
    probed(
        "perf",
        Provenance::Measured,
        PerfSource::open(root, host, opener.as_ref()).map(|s| Box::new(s) as Box<dyn EnergySource>),
        |_| format!("RAPL perf counters open under {}", root.display()),
        || perf::discover_domains(root, host).unwrap_or_default(),
    )
}

fn probe_powercap(options: &SourceOptions, host: &HostInfo) -> Probed {
    let root = &options.powercap_root;
    probed(
        "powercap",
        Provenance::Measured,
        PowercapSource::open(root, host).map(|s| Box::new(s) as Box<dyn EnergySource>),
        |_| format!("RAPL counters readable under {}", root.display()),
        || powercap::discover_domains(root, host).unwrap_or_default(),
    )
}

fn probe_nvml(options: &SourceOptions) -> Probed {
    let Some(lib) = &options.nvml_lib else {
        return Probed {
            probe: SourceProbe {
                name: "nvml",
                provenance: Provenance::Measured,
                domains: Vec::new(),
                status: ProbeStatus::NotAvailable,
                usable: false,
                needs_privileges: false,
                reason: "GPUs not measured (--no-gpu)".into(),
            },
            source: Err(SourceError::Conflict("--no-gpu".into())),
        };
    };
    probed(
        "nvml",
        Provenance::Measured,
        nvml::open_source(lib, options.state_dir.as_deref())
            .map(|s| Box::new(s) as Box<dyn EnergySource>),
        |s| s.describe(),
        Vec::new,
    )
}

fn probe_meter(options: &SourceOptions) -> Option<Probed> {
    let path = options.power_log.as_ref()?;
    Some(probed(
        "meter",
        Provenance::Measured,
        MeterSource::open(path, meter::DEFAULT_SETTLE_WAIT)
            .map(|s| Box::new(s) as Box<dyn EnergySource>),
        |s| s.describe(),
        Vec::new,
    ))
}

fn probe_model(options: &SourceOptions, host: &HostInfo) -> Probed {
    probed(
        "model",
        Provenance::Estimated,
        ModelSource::new(host, options.model_watts).map(|s| Box::new(s) as Box<dyn EnergySource>),
        |s| s.describe(),
        Vec::new,
    )
}

/// Probes every source this machine might offer, whatever `--source` says (for
/// `cg-trace sources`): perf, powercap (each checked for advancing counters), NVML, the
/// meter when a log is given, the model.
pub fn probe_all(options: &SourceOptions, host: &HostInfo) -> Vec<SourceProbe> {
    let mut rapl = [probe_perf(options, host), probe_powercap(options, host)];
    for p in &mut rapl {
        p.check_advancing();
    }
    let [perf, powercap] = rapl;
    let mut probes = vec![perf.probe, powercap.probe, probe_nvml(options).probe];
    if let Some(meter) = probe_meter(options) {
        probes.push(meter.probe);
    }
    probes.push(probe_model(options, host).probe);
    probes
}

/// The names of the sources `auto` would use given these probes, as if every source that only
/// lacks privileges could be read (what running as root would change).
pub fn auto_choice_with_privileges(probes: &[SourceProbe]) -> Vec<&'static str> {
    let ok = |p: &&SourceProbe| p.usable || p.needs_privileges;
    let find = |name: &str| probes.iter().filter(ok).find(|p| p.name == name);
    let mut names = Vec::new();
    let meter = find("meter");
    if meter.is_some() {
        names.push("meter");
    }
    match (find("perf"), find("powercap")) {
        (Some(_), _) => names.push("perf"),
        (None, Some(_)) => names.push("powercap"),
        (None, None) if meter.is_none() => names.push("model"),
        _ => {}
    }
    if find("nvml").is_some() {
        names.push("nvml");
    }
    names
}

/// Says where perf and powercap disagree on the RAPL domains, if they do; `used` names the one
/// whose figures the run uses.
pub fn disagreement(perf: &[ProbeDomain], powercap: &[ProbeDomain], used: &str) -> Option<String> {
    if perf.is_empty() || powercap.is_empty() {
        return None;
    }
    let names = |d: &[ProbeDomain]| d.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
    let (a, b) = (names(perf), names(powercap));
    let only_perf: Vec<&String> = a.iter().filter(|n| !b.contains(n)).collect();
    let only_powercap: Vec<&String> = b.iter().filter(|n| !a.contains(n)).collect();
    let nesting_differs = perf.iter().any(|p| {
        powercap
            .iter()
            .any(|q| q.name == p.name && q.parent != p.parent)
    });
    if only_perf.is_empty() && only_powercap.is_empty() && !nesting_differs {
        return None;
    }
    let list = |v: &[&String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        }
    };
    Some(format!(
        "perf and powercap disagree on the RAPL domains (only perf: {}; only powercap: {}{}); \
         the figures come from {}",
        list(&only_perf),
        list(&only_powercap),
        if nesting_differs {
            "; nesting differs"
        } else {
            ""
        },
        used
    ))
}

/// The advance check of the RAPL source a run would use: `auto` drops one whose counters do
/// not move and checks the next (powercap is checked only when perf is not used); a source
/// asked for by name is kept, with a note saying its counters did not move.
fn check_rapl_advances(
    choice: SourceChoice,
    perf: &mut Option<Probed>,
    powercap: &mut Option<Probed>,
    notes: &mut Vec<SourceNote>,
) {
    if choice == SourceChoice::Auto {
        if let Some(p) = perf.as_mut() {
            p.drop_unless_advancing();
        }
        if perf.as_ref().is_none_or(|p| p.source.is_err())
            && let Some(p) = powercap.as_mut()
        {
            p.drop_unless_advancing();
        }
        return;
    }
    for p in perf.iter_mut().chain(powercap.iter_mut()) {
        if let Some(err) = p.check_advancing() {
            notes.push(SourceNote::info(format!(
                "{err}; used all the same because --source {} asks for it (where it stays still \
                 while its CPUs are busy, the energy is unknown)",
                p.probe.name
            )));
        }
    }
}

/// The source of the machine's CPU-side energy, given the RAPL probes (checked already), and
/// why; `None` beside a meter when no RAPL is usable. What was probed joins `probes`.
fn cpu_side(
    options: &SourceOptions,
    host: &HostInfo,
    perf: Option<Probed>,
    powercap: Option<Probed>,
    has_meter: bool,
    probes: &mut Vec<SourceProbe>,
) -> Result<(Option<Box<dyn EnergySource>>, String), SourceError> {
    let perf_reason = perf.as_ref().map(|p| p.probe.reason.clone());
    probes.extend(perf.iter().chain(powercap.iter()).map(|p| p.probe.clone()));
    Ok(match (options.choice, perf, powercap) {
        (SourceChoice::Perf, Some(p), _) => {
            (Some(p.source?), "requested with --source perf".into())
        }
        (SourceChoice::Powercap, _, Some(p)) => {
            (Some(p.source?), "requested with --source powercap".into())
        }
        (SourceChoice::Model, _, _) => {
            let model = probe_model(options, host);
            probes.push(model.probe);
            (Some(model.source?), "requested with --source model".into())
        }
        (_, Some(Probed { source: Ok(s), .. }), _) => (
            Some(s),
            "auto: RAPL through the perf power PMU is the best measured source".into(),
        ),
        (_, _, Some(Probed { source: Ok(s), .. })) => (
            Some(s),
            format!(
                "auto: RAPL through powercap (perf power PMU: {})",
                perf_reason.unwrap_or_default()
            ),
        ),
        (_, perf, powercap) => {
            let why: Vec<String> = [perf, powercap]
                .into_iter()
                .flatten()
                .filter_map(|p| p.source.err().map(|e| e.to_string()))
                .collect();
            if has_meter {
                (
                    None,
                    format!("no RAPL beside the meter ({})", why.join("; ")),
                )
            } else {
                let model = probe_model(options, host);
                probes.push(model.probe);
                (
                    Some(model.source?),
                    format!(
                        "auto: no measured source usable ({}); using the built-in power model",
                        why.join("; ")
                    ),
                )
            }
        }
    })
}

/// Why a run measures GPUs (a part of the selection's reason).
pub fn gpu_reason(source: &dyn EnergySource) -> String {
    format!("GPUs: {}", source.describe())
}

/// What replaces a RAPL source found still during the calibration ([`fall_back`]).
pub struct Fallback {
    /// Powercap or the model (checked and primed).
    pub source: Box<dyn EnergySource>,
    /// Why, as [`Selection::reason`] words its RAPL part.
    pub reason: String,
    /// What was probed: the still source first, then the others looked at.
    pub probes: Vec<SourceProbe>,
}

/// `auto` found the counters of `still` (perf or powercap, `domains` its domains) still during
/// the idle calibration (`err` says so): the next source the same rules pick without it,
/// powercap after perf if its counters advance, else the model.
pub fn fall_back(
    options: &SourceOptions,
    host: &HostInfo,
    still: &'static str,
    domains: &[DomainSpec],
    err: SourceError,
) -> Result<Fallback, SourceError> {
    let still = Probed {
        probe: SourceProbe {
            name: still,
            provenance: Provenance::Measured,
            domains: domains.iter().map(ProbeDomain::from).collect(),
            status: ProbeStatus::of_error(&err),
            usable: false,
            needs_privileges: false,
            reason: err.to_string(),
        },
        source: Err(err),
    };
    let (perf, powercap) = if still.probe.name == "perf" {
        let mut powercap = probe_powercap(options, host);
        powercap.drop_unless_advancing();
        (Some(still), Some(powercap))
    } else {
        (None, Some(still))
    };
    let mut probes = Vec::new();
    let (source, reason) = cpu_side(options, host, perf, powercap, false, &mut probes)?;
    // Without a meter, cpu_side always gives a source (the model at worst).
    let mut source = source.ok_or_else(|| SourceError::Conflict("no fallback source".into()))?;
    source.read(&ReadContext {
        duration_ns: 0,
        busy_ns_per_cpu: &[],
        wall_start_ns: 0,
        wall_end_ns: 0,
    })?;
    Ok(Fallback {
        source,
        reason,
        probes,
    })
}

/// Opens the sources `options` ask for (see the module docs for the rules); an explicitly
/// requested source that cannot be used is an error, as is a power log that cannot be read.
pub fn select(options: &SourceOptions, host: &HostInfo) -> Result<Selection, SourceError> {
    let mut probes = Vec::new();
    let mut notes = Vec::new();
    let meter = probe_meter(options);
    if options.choice == SourceChoice::Model && meter.is_some() {
        return Err(SourceError::Conflict(
            "--source model cannot be used with --power-log: the meter measures the whole \
             machine, an estimate beside it would add nothing (use --source auto)"
                .into(),
        ));
    }
    let mut perf = matches!(options.choice, SourceChoice::Auto | SourceChoice::Perf)
        .then(|| probe_perf(options, host));
    let mut powercap = matches!(options.choice, SourceChoice::Auto | SourceChoice::Powercap)
        .then(|| probe_powercap(options, host));
    check_rapl_advances(options.choice, &mut perf, &mut powercap, &mut notes);
    if let (Some(p), Some(q)) = (&perf, &powercap) {
        let used = if p.source.is_ok() { "perf" } else { "powercap" };
        if let Some(warning) = disagreement(&p.probe.domains, &q.probe.domains, used) {
            notes.push(SourceNote::info(warning));
        }
    }
    let mut sources: Vec<Box<dyn EnergySource>> = Vec::new();
    let mut reasons: Vec<String> = Vec::new();

    if let Some(m) = meter {
        probes.push(m.probe);
        sources.push(m.source?);
        reasons.push(
            "--power-log: the meter is the energy of the whole machine; other measured domains \
             nest inside it"
                .to_string(),
        );
    }
    let has_meter = !sources.is_empty();
    let (cpu, reason) = cpu_side(options, host, perf, powercap, has_meter, &mut probes)?;
    sources.extend(cpu);
    reasons.push(reason);

    let gpu = probe_nvml(options);
    let gpu_probe = gpu.probe.clone();
    match gpu.source {
        Ok(source) => {
            reasons.push(gpu_reason(source.as_ref()));
            sources.push(source);
        }
        Err(err @ (SourceError::NvmlUnavailable { .. } | SourceError::NvmlNoDevice { .. }))
            if options.nvml_required =>
        {
            return Err(err);
        }
        Err(SourceError::NvmlUnavailable { missing: true, .. }) | Err(SourceError::Conflict(_)) => {
        }
        Err(err) => notes.push(SourceNote::info(format!(
            "no GPU energy: {err}; the run goes on without it"
        ))),
    }
    if options.nvml_lib.is_some() {
        probes.push(gpu_probe);
    }

    if has_meter {
        sources = sources
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                if i == 0 {
                    s
                } else {
                    Box::new(Nested::inside(s, "meter")) as Box<dyn EnergySource>
                }
            })
            .collect();
    }
    Ok(Selection {
        sources,
        reason: reasons.join("; "),
        probes,
        notes,
    })
}

/// A source whose top-level domains are placed inside another domain (the meter's).
struct Nested {
    inner: Box<dyn EnergySource>,
    domains: Vec<DomainSpec>,
}

impl Nested {
    fn inside(inner: Box<dyn EnergySource>, parent: &str) -> Self {
        let domains = inner
            .domains()
            .iter()
            .map(|d| DomainSpec {
                parent: d.parent.clone().or_else(|| Some(parent.to_string())),
                ..d.clone()
            })
            .collect();
        Nested { inner, domains }
    }
}

impl EnergySource for Nested {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn provenance(&self) -> Provenance {
        self.inner.provenance()
    }
    fn domains(&self) -> &[DomainSpec] {
        &self.domains
    }
    fn read(&mut self, ctx: &ReadContext<'_>) -> Result<Vec<Reading>, SourceError> {
        self.inner.read(ctx)
    }
    fn failed_read_carries_over(&self) -> bool {
        self.inner.failed_read_carries_over()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn known_idle_w(&self) -> Option<Vec<f64>> {
        self.inner.known_idle_w()
    }
    fn busy_slope_w(&self) -> Option<Vec<f64>> {
        self.inner.busy_slope_w()
    }
    fn rest_power(&self) -> Option<Vec<Option<super::gpu_rest::RestPower>>> {
        self.inner.rest_power()
    }
    fn gpu_activity(&self) -> Vec<GpuActivity> {
        self.inner.gpu_activity()
    }
    fn settle(&mut self, spans: &[WallSpan]) -> Option<Result<Vec<Vec<f64>>, SourceError>> {
        self.inner.settle(spans)
    }
    fn summary(&self) -> SourceSummary {
        self.inner.summary()
    }
}

#[cfg(test)]
mod tests {
    use std::{fs, path::Path};

    use super::*;
    use crate::sources::DomainKind;

    fn host() -> HostInfo {
        HostInfo {
            hostname: "h".into(),
            kernel: "k".into(),
            cpu_model: "m".into(),
            cpu_packages: vec![0, 0],
        }
    }

    /// A perf tree (sysfs + counter files for the file opener) with the given events.
    fn perf_tree(dir: &Path, events: &[&str]) -> SourceOptions {
        let pmu = dir.join("sysfs/power");
        fs::create_dir_all(pmu.join("events")).unwrap();
        fs::write(pmu.join("type"), "9\n").unwrap();
        fs::write(pmu.join("cpumask"), "0\n").unwrap();
        for (i, e) in events.iter().enumerate() {
            fs::write(
                pmu.join("events").join(e),
                format!("event=0x{:02x}\n", i + 1),
            )
            .unwrap();
            fs::write(pmu.join("events").join(format!("{e}.scale")), "1e-6\n").unwrap();
            let c = dir.join("counters/power").join(e);
            fs::create_dir_all(&c).unwrap();
            fs::write(c.join("cpu0"), 0u64.to_ne_bytes()).unwrap();
        }
        SourceOptions {
            perf_root: dir.join("sysfs"),
            perf_counters_from: Some(dir.join("counters")),
            powercap_root: dir.join("no-powercap"),
            nvml_lib: Some(dir.join("no-libnvidia-ml.so.1")),
            ..SourceOptions::default()
        }
    }

    fn powercap_tree(root: &Path, zones: &[(&str, &str)]) {
        for (dir, name) in zones {
            let d = root.join(dir);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("name"), format!("{name}\n")).unwrap();
            fs::write(d.join("energy_uj"), "0\n").unwrap();
            fs::write(d.join("max_energy_range_uj"), "262143328850\n").unwrap();
        }
    }

    /// Advances the given counters by one count every millisecond until dropped, as live
    /// RAPL does: perf counter files (8-byte counts) and powercap `energy_uj` files (text),
    /// rewritten in place at a fixed width.
    struct Ticking {
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Ticking {
        fn start(perf: Vec<std::path::PathBuf>, powercap: Vec<std::path::PathBuf>) -> Self {
            use std::{os::unix::fs::FileExt, sync::atomic::Ordering};
            let open = |p: &Path| fs::OpenOptions::new().write(true).open(p).unwrap();
            let perf: Vec<fs::File> = perf.iter().map(|p| open(p)).collect();
            let powercap: Vec<fs::File> = powercap.iter().map(|p| open(p)).collect();
            let write = move |count: u64| {
                for f in &perf {
                    f.write_all_at(&count.to_ne_bytes(), 0).unwrap();
                }
                for f in &powercap {
                    f.write_all_at(format!("{count:020}\n").as_bytes(), 0)
                        .unwrap();
                }
            };
            // The files take their final length before anything reads them as they change.
            write(1);
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = stop.clone();
            let thread = std::thread::spawn(move || {
                let mut count = 1u64;
                while !flag.load(Ordering::Relaxed) {
                    count += 1;
                    write(count);
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            Ticking {
                stop,
                thread: Some(thread),
            }
        }
    }

    impl Drop for Ticking {
        fn drop(&mut self) {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// The counter files of a [`perf_tree`].
    fn perf_counters(dir: &Path, events: &[&str]) -> Vec<std::path::PathBuf> {
        events
            .iter()
            .map(|e| dir.join("counters/power").join(e).join("cpu0"))
            .collect()
    }

    /// The `energy_uj` files of a [`powercap_tree`].
    fn powercap_counters(root: &Path, zones: &[(&str, &str)]) -> Vec<std::path::PathBuf> {
        zones
            .iter()
            .map(|(dir, _)| root.join(dir).join("energy_uj"))
            .collect()
    }

    fn names(selection: &Selection) -> Vec<&'static str> {
        selection.sources.iter().map(|s| s.name()).collect()
    }

    #[test]
    fn auto_prefers_perf_and_warns_when_powercap_disagrees() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = perf_tree(dir.path(), &["energy-pkg"]);
        options.powercap_root = dir.path().join("powercap");
        powercap_tree(
            &options.powercap_root,
            &[("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "dram")],
        );
        let _live = Ticking::start(perf_counters(dir.path(), &["energy-pkg"]), Vec::new());
        let selection = select(&options, &host()).unwrap();
        assert_eq!(names(&selection), ["perf"]);
        assert!(selection.reason.contains("perf"), "{}", selection.reason);
        assert!(
            selection.notes[0].text.contains("only powercap: dram-0"),
            "{:?}",
            selection.notes
        );
        let probed: Vec<_> = selection
            .probes
            .iter()
            .map(|p| (p.name, p.usable))
            .collect();
        assert_eq!(
            probed,
            [("perf", true), ("powercap", true), ("nvml", false)]
        );
        // When they agree, nothing is said.
        fs::remove_dir_all(options.powercap_root.join("intel-rapl:0:0")).unwrap();
        assert!(select(&options, &host()).unwrap().notes.is_empty());
    }

    #[test]
    fn auto_falls_back_to_powercap_then_to_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = SourceOptions {
            perf_root: dir.path().join("none"),
            powercap_root: dir.path().join("powercap"),
            nvml_lib: None,
            ..SourceOptions::default()
        };
        powercap_tree(&options.powercap_root, &[("intel-rapl:0", "package-0")]);
        let live = Ticking::start(
            Vec::new(),
            powercap_counters(&options.powercap_root, &[("intel-rapl:0", "package-0")]),
        );
        let selection = select(&options, &host()).unwrap();
        drop(live);
        assert_eq!(names(&selection), ["powercap"]);
        assert!(
            selection.reason.contains("no RAPL perf PMU"),
            "{}",
            selection.reason
        );
        options.powercap_root = dir.path().join("none");
        let selection = select(&options, &host()).unwrap();
        assert_eq!(names(&selection), ["model"]);
        assert!(
            selection.reason.contains("no measured source"),
            "{}",
            selection.reason
        );
    }

    #[test]
    fn an_explicit_source_that_cannot_be_used_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let options = SourceOptions {
            choice: SourceChoice::Perf,
            perf_root: dir.path().to_path_buf(),
            nvml_lib: None,
            ..SourceOptions::default()
        };
        let err = select(&options, &host()).err().unwrap();
        assert!(matches!(err, SourceError::PerfMissing { .. }), "{err}");
    }

    #[test]
    fn a_power_log_becomes_the_top_level_domain_with_rapl_inside() {
        let dir = tempfile::tempdir().unwrap();
        let events = ["energy-pkg", "energy-ram"];
        let mut options = perf_tree(dir.path(), &events);
        let log = dir.path().join("power.csv");
        fs::write(&log, "time,watts\n1770200123,100\n").unwrap();
        options.power_log = Some(log);
        let live = Ticking::start(perf_counters(dir.path(), &events), Vec::new());
        let selection = select(&options, &host()).unwrap();
        drop(live);
        assert_eq!(names(&selection), ["meter", "perf"]);
        let domains: Vec<(String, Option<String>, DomainKind)> = selection
            .sources
            .iter()
            .flat_map(|s| s.domains().to_vec())
            .map(|d| (d.name, d.parent, d.kind))
            .collect();
        assert_eq!(
            domains,
            [
                ("meter".into(), None, DomainKind::Meter),
                (
                    "package-0".into(),
                    Some("meter".into()),
                    DomainKind::Package
                ),
                ("dram-0".into(), Some("meter".into()), DomainKind::Dram),
            ]
        );
        // The model is refused beside a meter; an unreadable log is an error.
        options.choice = SourceChoice::Model;
        assert!(matches!(
            select(&options, &host()).err().unwrap(),
            SourceError::Conflict(_)
        ));
        options.choice = SourceChoice::Auto;
        options.power_log = Some(dir.path().join("missing.csv"));
        assert!(matches!(
            select(&options, &host()).err().unwrap(),
            SourceError::PowerLog { .. }
        ));
    }

    #[test]
    fn a_named_nvml_library_must_work_the_default_may_be_absent() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = SourceOptions {
            perf_root: dir.path().join("none"),
            powercap_root: dir.path().join("none"),
            nvml_lib: Some(dir.path().join("libnvidia-ml.so.1")),
            ..SourceOptions::default()
        };
        let selection = select(&options, &host()).unwrap();
        assert_eq!(names(&selection), ["model"]);
        assert!(selection.notes.is_empty(), "{:?}", selection.notes);
        options.nvml_required = true;
        let err = select(&options, &host()).err().unwrap();
        assert!(err.to_string().contains("could not be loaded"), "{err}");
    }

    #[test]
    fn a_meter_alone_needs_no_model() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("power.csv");
        fs::write(&log, "time,watts\n").unwrap();
        let options = SourceOptions {
            perf_root: dir.path().join("none"),
            powercap_root: dir.path().join("none"),
            nvml_lib: None,
            power_log: Some(log),
            ..SourceOptions::default()
        };
        let selection = select(&options, &host()).unwrap();
        assert_eq!(names(&selection), ["meter"]);
    }

    #[test]
    fn probe_all_lists_every_source_and_what_root_would_change() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = perf_tree(dir.path(), &["energy-pkg"]);
        // The perf counters cannot be opened: make one a directory (refused for everyone).
        fs::remove_file(dir.path().join("counters/power/energy-pkg/cpu0")).unwrap();
        options.powercap_root = dir.path().join("powercap");
        let zones = [("intel-rapl:0", "package-0")];
        powercap_tree(&options.powercap_root, &zones);
        let live = Ticking::start(
            Vec::new(),
            powercap_counters(&options.powercap_root, &zones),
        );
        let probes = probe_all(&options, &host());
        drop(live);
        let names: Vec<_> = probes.iter().map(|p| p.name).collect();
        assert_eq!(names, ["perf", "powercap", "nvml", "model"]);
        assert!(!probes[0].usable);
        // Discovery got as far as the domains even though the counter could not be opened.
        assert_eq!(probes[0].domains[0].name, "package-0");
        assert!(probes[1].usable);
        assert!(!probes[2].usable && probes[2].reason.contains("could not be loaded"));
        assert_eq!(auto_choice_with_privileges(&probes), ["powercap"]);
        // A source refused only for lack of privileges counts as usable "as root".
        let mut as_user = probes.clone();
        as_user[0].needs_privileges = true;
        as_user[1].usable = false;
        assert_eq!(auto_choice_with_privileges(&as_user), ["perf"]);
    }

    /// The H100 VM's perf PMU (sources.json of the recording): one `psys` event whose count
    /// never changes.
    const STILL_PSYS: [&str; 1] = ["energy-psys"];

    #[test]
    fn a_counter_that_does_not_move_while_a_cpu_is_busy_is_not_advancing() {
        let dir = tempfile::tempdir().unwrap();
        let options = perf_tree(dir.path(), &STILL_PSYS);
        let opener = FileOpener {
            dir: dir.path().join("counters"),
        };
        let mut perf = PerfSource::open(&options.perf_root, &host(), &opener).unwrap();
        let err = check_advancing(&mut perf, Duration::from_millis(20)).unwrap_err();
        assert!(matches!(err, SourceError::NotAdvancing { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("perf counters present, not advancing: psys did not move in "),
            "{text}"
        );
        assert!(text.contains("with a CPU kept busy"), "{text}");
        // The same counter ticking: it advances.
        let _live = Ticking::start(perf_counters(dir.path(), &STILL_PSYS), Vec::new());
        check_advancing(&mut perf, ADVANCE_CHECK).unwrap();
    }

    #[test]
    fn auto_drops_a_still_perf_psys_for_live_powercap_then_for_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = perf_tree(dir.path(), &STILL_PSYS);
        options.powercap_root = dir.path().join("powercap");
        let zones = [("intel-rapl:0", "package-0")];
        powercap_tree(&options.powercap_root, &zones);
        let live = Ticking::start(
            Vec::new(),
            powercap_counters(&options.powercap_root, &zones),
        );
        let selection = select(&options, &host()).unwrap();
        drop(live);
        assert_eq!(names(&selection), ["powercap"]);
        assert!(
            selection.reason.contains(
                "auto: RAPL through powercap (perf power PMU: perf counters present, not \
                 advancing: psys"
            ),
            "{}",
            selection.reason
        );
        assert_eq!(selection.probes[0].status, ProbeStatus::NotAdvancing);
        assert!(!selection.probes[0].usable);
        assert_eq!(selection.probes[1].status, ProbeStatus::Usable);
        // Powercap still too: the model, with both reasons.
        let selection = select(&options, &host()).unwrap();
        assert_eq!(names(&selection), ["model"]);
        assert!(
            selection.reason.starts_with(
                "auto: no measured source usable (perf counters present, not advancing: psys"
            ),
            "{}",
            selection.reason
        );
        assert!(
            selection
                .reason
                .contains("powercap counters present, not advancing: package-0"),
            "{}",
            selection.reason
        );
        let statuses: Vec<_> = selection
            .probes
            .iter()
            .map(|p| (p.name, p.status))
            .collect();
        assert_eq!(
            statuses[..3],
            [
                ("perf", ProbeStatus::NotAdvancing),
                ("powercap", ProbeStatus::NotAdvancing),
                ("model", ProbeStatus::Usable)
            ]
        );
    }

    #[test]
    fn a_still_source_asked_for_by_name_is_used_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = perf_tree(dir.path(), &STILL_PSYS);
        options.choice = SourceChoice::Perf;
        let selection = select(&options, &host()).unwrap();
        assert_eq!(names(&selection), ["perf"]);
        assert_eq!(selection.probes[0].status, ProbeStatus::NotAdvancing);
        assert!(
            selection.notes[0].text.contains("psys did not move in ")
                && selection.notes[0]
                    .text
                    .contains("used all the same because --source perf asks for it"),
            "{:?}",
            selection.notes
        );
    }

    #[test]
    fn probe_all_says_which_rapl_counters_do_not_advance() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = perf_tree(dir.path(), &STILL_PSYS);
        options.powercap_root = dir.path().join("powercap");
        let zones = [("intel-rapl:0", "package-0")];
        powercap_tree(&options.powercap_root, &zones);
        let _live = Ticking::start(
            Vec::new(),
            powercap_counters(&options.powercap_root, &zones),
        );
        let probes = probe_all(&options, &host());
        assert_eq!(probes[0].status, ProbeStatus::NotAdvancing);
        assert_eq!(probes[0].domains[0].name, "psys");
        assert_eq!(probes[1].status, ProbeStatus::Usable);
        assert_eq!(auto_choice_with_privileges(&probes), ["powercap"]);
        let json = serde_json::to_value(&probes[0]).unwrap();
        assert_eq!(json["status"], "not_advancing");
        assert_eq!(json["usable"], false);
    }

    #[test]
    fn a_source_still_at_calibration_falls_back_to_live_powercap_else_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = perf_tree(dir.path(), &STILL_PSYS);
        options.powercap_root = dir.path().join("powercap");
        let zones = [("intel-rapl:0", "package-0")];
        powercap_tree(&options.powercap_root, &zones);
        let psys = DomainSpec {
            name: "psys".into(),
            kind: DomainKind::Psys,
            parent: None,
            coverage: crate::attribution::Coverage::AllCpus,
            provenance: Provenance::Measured,
            source: "perf",
        };
        let still = || SourceError::NotAdvancing {
            name: "perf",
            domains: "psys".into(),
            when: "during the 500 ms idle calibration".into(),
        };
        let live = Ticking::start(
            Vec::new(),
            powercap_counters(&options.powercap_root, &zones),
        );
        let fallback = fall_back(
            &options,
            &host(),
            "perf",
            std::slice::from_ref(&psys),
            still(),
        )
        .unwrap();
        drop(live);
        assert_eq!(fallback.source.name(), "powercap", "{}", fallback.reason);
        assert!(
            fallback
                .reason
                .contains("psys did not move during the 500 ms idle calibration"),
            "{}",
            fallback.reason
        );
        let probed: Vec<_> = fallback.probes.iter().map(|p| (p.name, p.status)).collect();
        assert_eq!(
            probed,
            [
                ("perf", ProbeStatus::NotAdvancing),
                ("powercap", ProbeStatus::Usable)
            ]
        );
        let fallback = fall_back(&options, &host(), "perf", &[psys], still()).unwrap();
        assert_eq!(fallback.source.name(), "model");
        assert!(
            fallback.reason.contains("using the built-in power model"),
            "{}",
            fallback.reason
        );
    }
}
