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

use super::{
    DomainSpec, EnergySource, GpuActivity, ProbeDomain, Provenance, ReadContext, Reading,
    Selection, SourceChoice, SourceError, SourceNote, SourceOptions, SourceProbe, SourceSummary,
    WallSpan,
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
            usable: true,
            needs_privileges: false,
            reason: usable_reason(source.as_ref()),
        },
        Err(err) => SourceProbe {
            name,
            provenance,
            domains: discovered().iter().map(ProbeDomain::from).collect(),
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
/// `cg-trace sources`): perf, powercap, NVML, the meter when a log is given, the model.
pub fn probe_all(options: &SourceOptions, host: &HostInfo) -> Vec<SourceProbe> {
    let mut probes = vec![
        probe_perf(options, host).probe,
        probe_powercap(options, host).probe,
        probe_nvml(options).probe,
    ];
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
    let perf = matches!(options.choice, SourceChoice::Auto | SourceChoice::Perf)
        .then(|| probe_perf(options, host));
    let powercap = matches!(options.choice, SourceChoice::Auto | SourceChoice::Powercap)
        .then(|| probe_powercap(options, host));
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
    let perf_reason = perf.as_ref().map(|p| p.probe.reason.clone());
    if let Some(p) = &perf {
        probes.push(p.probe.clone());
    }
    if let Some(p) = &powercap {
        probes.push(p.probe.clone());
    }
    match (options.choice, perf, powercap) {
        (SourceChoice::Perf, Some(p), _) => {
            sources.push(p.source?);
            reasons.push("requested with --source perf".into());
        }
        (SourceChoice::Powercap, _, Some(p)) => {
            sources.push(p.source?);
            reasons.push("requested with --source powercap".into());
        }
        (SourceChoice::Model, _, _) => {
            let model = probe_model(options, host);
            probes.push(model.probe);
            sources.push(model.source?);
            reasons.push("requested with --source model".into());
        }
        (_, Some(Probed { source: Ok(s), .. }), _) => {
            sources.push(s);
            reasons
                .push("auto: RAPL through the perf power PMU is the best measured source".into());
        }
        (_, _, Some(Probed { source: Ok(s), .. })) => {
            sources.push(s);
            reasons.push(format!(
                "auto: RAPL through powercap (perf power PMU: {})",
                perf_reason.unwrap_or_default()
            ));
        }
        (_, perf, powercap) => {
            let why: Vec<String> = [perf, powercap]
                .into_iter()
                .flatten()
                .filter_map(|p| p.source.err().map(|e| e.to_string()))
                .collect();
            if has_meter {
                reasons.push(format!("no RAPL beside the meter ({})", why.join("; ")));
            } else {
                let model = probe_model(options, host);
                probes.push(model.probe);
                sources.push(model.source?);
                reasons.push(format!(
                    "auto: no measured source usable ({}); using the built-in power model",
                    why.join("; ")
                ));
            }
        }
    }

    let gpu = probe_nvml(options);
    let gpu_probe = gpu.probe.clone();
    match gpu.source {
        Ok(source) => {
            reasons.push(format!("GPUs: {}", source.describe()));
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
            fs::write(d.join("max_energy_range_uj"), "1000000\n").unwrap();
        }
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
        let selection = select(&options, &host()).unwrap();
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
        let mut options = perf_tree(dir.path(), &["energy-pkg", "energy-ram"]);
        let log = dir.path().join("power.csv");
        fs::write(&log, "time,watts\n1770200123,100\n").unwrap();
        options.power_log = Some(log);
        let selection = select(&options, &host()).unwrap();
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
        powercap_tree(&options.powercap_root, &[("intel-rapl:0", "package-0")]);
        let probes = probe_all(&options, &host());
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
}
