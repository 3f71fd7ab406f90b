//! The exporter's metrics in the OpenMetrics text format (through the `prometheus-client`
//! crate), and the same in Prometheus's older text format for scrapers that do not ask for
//! OpenMetrics.

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Metric, Registry, Unit},
};
use std::sync::atomic::AtomicU64;

use super::{
    kube::pods::PodNames,
    model::{GroupKey, Scrape},
};

type Labels = Vec<(&'static str, String)>;
type F64Counter = Counter<f64, AtomicU64>;
type F64Gauge = Gauge<f64, AtomicU64>;

/// What cg-trace itself costs, read when scraped.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OwnCost {
    pub cpu_s: f64,
    pub rss_bytes: u64,
}

impl OwnCost {
    /// This process's CPU time (getrusage) and resident memory now (`/proc/self/statm`).
    pub fn now() -> Self {
        // SAFETY: getrusage writes into the struct we own.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage
        };
        let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
        let rss_pages = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0);
        OwnCost {
            cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
            rss_bytes: rss_pages.saturating_mul(page),
        }
    }
}

/// A metric's unit, as its name's suffix says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MetricUnit {
    None,
    Joules,
    Watts,
    Seconds,
    Bytes,
}

/// One metric of the exporter: its name (without its unit or `_total`), unit and help text.
#[derive(Clone, Copy, Debug)]
struct MetricDef {
    name: &'static str,
    unit: MetricUnit,
    help: &'static str,
}

const fn def(name: &'static str, unit: MetricUnit, help: &'static str) -> MetricDef {
    MetricDef { name, unit, help }
}

/// The exporter's series, in the order a scrape shows them: an index into [`METRICS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Series {
    Energy,
    HostEnergy,
    Power,
    IdleBaseline,
    EnergyUnknown,
    DomainInfo,
    Cpu,
    SourceInfo,
    Measured,
    ReadErrors,
    LostEvents,
    GroupsKnown,
    ProcessesLive,
    BuildInfo,
    ProcessCpu,
    ProcessMemory,
}

/// Every metric, by [`Series`].
const METRICS: [MetricDef; 16] = [
    // Energy
    def(
        "cg_trace_energy",
        MetricUnit::Joules,
        "Energy per domain and process group (top groups by energy; idle, other and exited \
         are their own series): the series of a domain add up to cg_trace_host_energy_joules_total",
    ),
    // HostEnergy
    def(
        "cg_trace_host_energy",
        MetricUnit::Joules,
        "Energy the domain's source measured (or the model estimated); top-level domains \
         (cg_trace_domain_info top_level=\"true\") add up to the machine's",
    ),
    // Power
    def(
        "cg_trace_power",
        MetricUnit::Watts,
        "Power of the domain over the last interval",
    ),
    // IdleBaseline
    def(
        "cg_trace_idle_baseline",
        MetricUnit::Watts,
        "Idle baseline of the domain (see idle_method in cg_trace_domain_info)",
    ),
    // EnergyUnknown
    def(
        "cg_trace_energy_unknown",
        MetricUnit::Seconds,
        "Time whose energy is unknown (counter glitches, failed reads): not in any counter",
    ),
    // DomainInfo
    def(
        "cg_trace_domain_info",
        MetricUnit::None,
        "Energy domains: kind, provenance (measured or estimated), whether top-level",
    ),
    // Cpu
    def(
        "cg_trace_cpu",
        MetricUnit::Seconds,
        "CPU time per process group (idle: the CPUs' idle time; other: every group not \
         exported and tasks not accounted one by one)",
    ),
    // SourceInfo
    def(
        "cg_trace_source_info",
        MetricUnit::None,
        "Energy sources: provenance (measured or estimated) and quality (degraded: energy \
         unknown in the last minute)",
    ),
    // Measured
    def(
        "cg_trace_measured",
        MetricUnit::Seconds,
        "Time the exporter's intervals cover",
    ),
    // ReadErrors
    def(
        "cg_trace_read_errors",
        MetricUnit::None,
        "Failed reads of energy sources or probes",
    ),
    // LostEvents
    def(
        "cg_trace_lost_events",
        MetricUnit::None,
        "Records the kernel side lost",
    ),
    // GroupsKnown
    def(
        "cg_trace_groups_known",
        MetricUnit::None,
        "Process groups remembered now (exported or not)",
    ),
    // ProcessesLive
    def(
        "cg_trace_processes_live",
        MetricUnit::None,
        "Live processes followed now",
    ),
    // BuildInfo
    def(
        "cg_trace_build_info",
        MetricUnit::None,
        "The cg-trace serving these metrics: its version and the git commit it was built from \
         (\"unknown\" when built outside a git checkout)",
    ),
    // ProcessCpu
    def(
        "process_cpu",
        MetricUnit::Seconds,
        "CPU time cg-trace itself used",
    ),
    // ProcessMemory
    def(
        "process_resident_memory",
        MetricUnit::Bytes,
        "cg-trace's own resident memory",
    ),
];

/// Adds `metric` to `registry` as the table describes `series`.
fn register(registry: &mut Registry, series: Series, metric: impl Metric) {
    let def = &METRICS[series as usize];
    let unit = match def.unit {
        MetricUnit::None => return registry.register(def.name, def.help, metric),
        MetricUnit::Joules => Unit::Joules,
        MetricUnit::Watts => Unit::Other("watts".into()),
        MetricUnit::Seconds => Unit::Seconds,
        MetricUnit::Bytes => Unit::Bytes,
    };
    registry.register_with_unit(def.name, def.help, unit, metric);
}

/// A figure a series can carry: a non-finite one reads 0.
fn finite(v: f64) -> f64 {
    if v.is_finite() { v } else { 0.0 }
}

fn counter(v: f64) -> F64Counter {
    let c = F64Counter::default();
    c.inc_by(finite(v));
    c
}

fn gauge(v: f64) -> F64Gauge {
    let g = F64Gauge::default();
    g.set(finite(v));
    g
}

/// Builds the registry of one scrape; a pod's groups are named by `pods` when it knows them.
fn registry(scrape: &Scrape, own: OwnCost, pods: Option<&PodNames>) -> Registry {
    let mut registry = Registry::default();
    let labels = GroupLabels::new(scrape, pods);
    register_group_energy(&mut registry, scrape, &labels);
    register_domains(&mut registry, scrape);
    register_group_cpu(&mut registry, scrape, &labels);
    register_sources(&mut registry, scrape);
    register_own(&mut registry, scrape, own);
    registry
}

/// A group's labels besides its name (grouped by cgroup or unit), when it has them.
struct GroupLabels<'a> {
    keys: std::collections::HashMap<&'a str, &'a GroupKey>,
    pods: Option<&'a PodNames>,
}

impl<'a> GroupLabels<'a> {
    fn new(scrape: &'a Scrape, pods: Option<&'a PodNames>) -> Self {
        let keys = scrape.labels.iter().map(|k| (k.name.as_str(), k)).collect();
        GroupLabels { keys, pods }
    }

    /// `labels`, then the group's name and what is known of it (its container, pod, unit).
    fn of(&self, group: &str, mut labels: Labels) -> Labels {
        labels.push(("group", group.to_string()));
        let Some(key) = self.keys.get(group) else {
            return labels;
        };
        for (name, value) in [
            ("container_id", &key.container_id),
            ("pod_uid", &key.pod_uid),
            ("systemd_unit", &key.systemd_unit),
        ] {
            if let Some(value) = value {
                labels.push((name, value.clone()));
            }
        }
        if let (Some(pods), Some(uid)) = (self.pods, &key.pod_uid)
            && let Some(names) = pods.names(uid, key.container_id.as_deref())
        {
            labels.push(("namespace", names.namespace.to_string()));
            labels.push(("pod", names.pod.to_string()));
            if let Some(container) = names.container {
                labels.push(("container", container.to_string()));
            }
        }
        labels
    }
}

/// Energy per domain and group.
fn register_group_energy(registry: &mut Registry, scrape: &Scrape, labels: &GroupLabels<'_>) {
    let energy = Family::<Labels, F64Counter>::default();
    for (d, group, joules) in &scrape.energy {
        let Some(domain) = scrape.domains.get(*d) else {
            continue;
        };
        energy
            .get_or_create(&labels.of(group, vec![("domain", domain.name.clone())]))
            .inc_by(finite(*joules));
    }
    register(registry, Series::Energy, energy);
}

/// Each domain's energy, power, baseline, unknown time and description.
fn register_domains(registry: &mut Registry, scrape: &Scrape) {
    let host = Family::<Labels, F64Counter>::default();
    let power = Family::<Labels, F64Gauge>::default();
    let baseline = Family::<Labels, F64Gauge>::default();
    let unknown = Family::<Labels, F64Counter>::default();
    let domain_info = Family::<Labels, Gauge>::default();
    for d in &scrape.domains {
        let name = vec![("domain", d.name.clone())];
        host.get_or_create(&name).inc_by(finite(d.host_j));
        power.get_or_create(&name).set(finite(d.power_w));
        baseline.get_or_create(&name).set(finite(d.idle_baseline_w));
        unknown.get_or_create(&name).inc_by(finite(d.unknown_s));
        domain_info
            .get_or_create(&vec![
                ("domain", d.name.clone()),
                ("kind", d.kind.clone()),
                ("provenance", d.provenance.as_str().to_string()),
                ("top_level", d.top_level.to_string()),
                ("idle_method", d.idle_method.to_string()),
            ])
            .set(1);
    }
    register(registry, Series::HostEnergy, host);
    register(registry, Series::Power, power);
    register(registry, Series::IdleBaseline, baseline);
    register(registry, Series::EnergyUnknown, unknown);
    register(registry, Series::DomainInfo, domain_info);
}

/// CPU time per group.
fn register_group_cpu(registry: &mut Registry, scrape: &Scrape, labels: &GroupLabels<'_>) {
    let cpu = Family::<Labels, F64Counter>::default();
    for (group, seconds) in &scrape.cpu {
        cpu.get_or_create(&labels.of(group, Vec::new()))
            .inc_by(finite(*seconds));
    }
    register(registry, Series::Cpu, cpu);
}

/// The energy sources.
fn register_sources(registry: &mut Registry, scrape: &Scrape) {
    let source_info = Family::<Labels, Gauge>::default();
    for source in &scrape.sources {
        source_info
            .get_or_create(&vec![
                ("source", source.name.clone()),
                ("provenance", source.provenance.as_str().to_string()),
                ("quality", source.quality.to_string()),
            ])
            .set(1);
    }
    register(registry, Series::SourceInfo, source_info);
}

/// The exporter's own figures: what it covered, lost and remembers, its build, its cost.
fn register_own(registry: &mut Registry, scrape: &Scrape, own: OwnCost) {
    register(registry, Series::Measured, counter(scrape.elapsed_s));
    register(
        registry,
        Series::ReadErrors,
        counter(scrape.read_errors as f64),
    );
    register(
        registry,
        Series::LostEvents,
        counter(scrape.lost_events as f64),
    );
    register(
        registry,
        Series::GroupsKnown,
        gauge(scrape.groups_known as f64),
    );
    register(
        registry,
        Series::ProcessesLive,
        gauge(scrape.processes_live as f64),
    );
    let build_info = Family::<Labels, Gauge>::default();
    build_info
        .get_or_create(&vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("commit", env!("CG_TRACE_GIT_COMMIT").to_string()),
        ])
        .set(1);
    register(registry, Series::BuildInfo, build_info);
    register(registry, Series::ProcessCpu, counter(own.cpu_s));
    register(registry, Series::ProcessMemory, gauge(own.rss_bytes as f64));
}

/// The scrape in the OpenMetrics text format.
pub fn openmetrics(scrape: &Scrape, own: OwnCost) -> String {
    openmetrics_named(scrape, own, None)
}

/// [`openmetrics`], with the `namespace`, `pod` and `container` labels of the pods `pods`
/// knows.
pub fn openmetrics_named(scrape: &Scrape, own: OwnCost, pods: Option<&PodNames>) -> String {
    let mut out = String::with_capacity(4096 + 160 * scrape.energy.len());
    // Writing to a String cannot fail; a label set the encoder refuses leaves the scrape short.
    if let Err(err) = encode(&mut out, &registry(scrape, own, pods)) {
        tracing::warn!("encoding metrics: {err}");
    }
    out
}

/// The same in Prometheus's text format 0.0.4: the OpenMetrics form without `# EOF` and
/// `# UNIT`, counters named with their `_total` suffix.
pub fn prometheus_text(openmetrics: &str) -> String {
    let mut types: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
        {
            types.insert(name, kind);
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            let (suffix, tail) = match (types.get(name).copied(), *prefix) {
                (Some("counter"), _) => ("_total", tail),
                _ => return None,
            };
            Some(format!("{prefix}{name}{suffix} {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::model::{DomainRow, SourceRow};

    fn scrape() -> Scrape {
        Scrape {
            domains: vec![DomainRow {
                name: "package-0".into(),
                kind: "package".into(),
                provenance: crate::sources::Provenance::Measured,
                top_level: true,
                host_j: 12.5,
                power_w: f64::NAN,
                idle_baseline_w: 3.0,
                idle_method: "rest",
                unknown_s: 0.0,
            }],
            energy: vec![(0, "web".into(), 9.5), (7, "gone".into(), 1.0)],
            cpu: vec![("web".into(), 2.0)],
            labels: vec![GroupKey {
                name: "web".into(),
                systemd_unit: Some("web.service".into()),
                ..GroupKey::default()
            }],
            sources: vec![SourceRow {
                name: "rapl".into(),
                provenance: crate::sources::Provenance::Measured,
                quality: "ok",
            }],
            elapsed_s: 4.0,
            ..Scrape::default()
        }
    }

    #[test]
    fn every_metric_of_the_table_is_scraped_once_in_the_table_order() {
        let text = openmetrics(&scrape(), OwnCost::default());
        let helps: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next())
            .collect();
        let expected: Vec<String> = METRICS
            .iter()
            .map(|m| match m.unit {
                MetricUnit::None => m.name.to_string(),
                MetricUnit::Joules => format!("{}_joules", m.name),
                MetricUnit::Watts => format!("{}_watts", m.name),
                MetricUnit::Seconds => format!("{}_seconds", m.name),
                MetricUnit::Bytes => format!("{}_bytes", m.name),
            })
            .collect();
        assert_eq!(helps, expected, "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn metric_names_are_unique_and_every_one_has_help() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
        // The last series is the table's last row, and a series names its own row.
        assert_eq!(Series::ProcessMemory as usize + 1, METRICS.len());
        assert_eq!(METRICS[Series::Power as usize].name, "cg_trace_power");
        assert_eq!(METRICS[Series::Cpu as usize].name, "cg_trace_cpu");
        assert!(METRICS.iter().all(|m| !m.help.trim().is_empty()));
    }

    #[test]
    fn a_group_carries_its_labels_and_a_figure_that_is_not_finite_reads_zero() {
        let text = openmetrics(&scrape(), OwnCost::default());
        assert!(
            text.contains(
                "cg_trace_energy_joules_total{domain=\"package-0\",group=\"web\",\
                 systemd_unit=\"web.service\"} 9.5"
            ),
            "{text}"
        );
        assert!(
            text.contains("cg_trace_power_watts{domain=\"package-0\"} 0.0"),
            "{text}"
        );
        // A figure of a domain the scrape does not have is left out.
        assert!(!text.contains("group=\"gone\""), "{text}");
    }
}
