//! The exporter's metrics in the OpenMetrics text format (through the `prometheus-client`
//! crate), and the same in Prometheus's older text format for scrapers that do not ask for
//! OpenMetrics.

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
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

/// Builds the registry of one scrape; a pod's groups are named by `pods` when it knows them.
fn registry(scrape: &Scrape, own: OwnCost, pods: Option<&PodNames>) -> Registry {
    let mut registry = Registry::default();
    let finite = |v: f64| if v.is_finite() { v } else { 0.0 };

    // A group's labels besides its name (grouped by cgroup or unit), when it has them.
    let keys: std::collections::HashMap<&str, &GroupKey> =
        scrape.labels.iter().map(|k| (k.name.as_str(), k)).collect();
    let group_labels = |group: &str, mut labels: Labels| -> Labels {
        labels.push(("group", group.to_string()));
        if let Some(key) = keys.get(group) {
            for (name, value) in [
                ("container_id", &key.container_id),
                ("pod_uid", &key.pod_uid),
                ("systemd_unit", &key.systemd_unit),
            ] {
                if let Some(value) = value {
                    labels.push((name, value.clone()));
                }
            }
            if let (Some(pods), Some(uid)) = (pods, &key.pod_uid)
                && let Some(names) = pods.names(uid, key.container_id.as_deref())
            {
                labels.push(("namespace", names.namespace.to_string()));
                labels.push(("pod", names.pod.to_string()));
                if let Some(container) = names.container {
                    labels.push(("container", container.to_string()));
                }
            }
        }
        labels
    };
    let energy = Family::<Labels, F64Counter>::default();
    for (d, group, joules) in &scrape.energy {
        let Some(domain) = scrape.domains.get(*d) else {
            continue;
        };
        energy
            .get_or_create(&group_labels(group, vec![("domain", domain.name.clone())]))
            .inc_by(finite(*joules));
    }
    registry.register_with_unit(
        "cg_trace_energy",
        "Energy per domain and process group (top groups by energy; idle, other and exited \
         are their own series): the series of a domain add up to cg_trace_host_energy_joules_total",
        Unit::Joules,
        energy,
    );

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
    registry.register_with_unit(
        "cg_trace_host_energy",
        "Energy the domain's source measured (or the model estimated); top-level domains \
         (cg_trace_domain_info top_level=\"true\") add up to the machine's",
        Unit::Joules,
        host,
    );
    registry.register_with_unit(
        "cg_trace_power",
        "Power of the domain over the last interval",
        Unit::Other("watts".into()),
        power,
    );
    registry.register_with_unit(
        "cg_trace_idle_baseline",
        "Idle baseline of the domain (see idle_method in cg_trace_domain_info)",
        Unit::Other("watts".into()),
        baseline,
    );
    registry.register_with_unit(
        "cg_trace_energy_unknown",
        "Time whose energy is unknown (counter glitches, failed reads): not in any counter",
        Unit::Seconds,
        unknown,
    );
    registry.register(
        "cg_trace_domain_info",
        "Energy domains: kind, provenance (measured or estimated), whether top-level",
        domain_info,
    );

    let cpu = Family::<Labels, F64Counter>::default();
    for (group, seconds) in &scrape.cpu {
        cpu.get_or_create(&group_labels(group, Vec::new()))
            .inc_by(finite(*seconds));
    }
    registry.register_with_unit(
        "cg_trace_cpu",
        "CPU time per process group (idle: the CPUs' idle time; other: every group not \
         exported and tasks not accounted one by one)",
        Unit::Seconds,
        cpu,
    );

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
    registry.register(
        "cg_trace_source_info",
        "Energy sources: provenance (measured or estimated) and quality (degraded: energy \
         unknown in the last minute)",
        source_info,
    );

    let counter = |v: f64| {
        let c = F64Counter::default();
        c.inc_by(finite(v));
        c
    };
    let gauge = |v: f64| {
        let g = F64Gauge::default();
        g.set(finite(v));
        g
    };
    registry.register_with_unit(
        "cg_trace_measured",
        "Time the exporter's intervals cover",
        Unit::Seconds,
        counter(scrape.elapsed_s),
    );
    registry.register(
        "cg_trace_read_errors",
        "Failed reads of energy sources or probes",
        counter(scrape.read_errors as f64),
    );
    registry.register(
        "cg_trace_lost_events",
        "Records the kernel side lost",
        counter(scrape.lost_events as f64),
    );
    registry.register(
        "cg_trace_groups_known",
        "Process groups remembered now (exported or not)",
        gauge(scrape.groups_known as f64),
    );
    registry.register(
        "cg_trace_processes_live",
        "Live processes followed now",
        gauge(scrape.processes_live as f64),
    );
    let build_info = Family::<Labels, Gauge>::default();
    build_info
        .get_or_create(&vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("commit", env!("CG_TRACE_GIT_COMMIT").to_string()),
        ])
        .set(1);
    registry.register(
        "cg_trace_build_info",
        "The cg-trace serving these metrics: its version and the git commit it was built from \
         (\"unknown\" when built outside a git checkout)",
        build_info,
    );
    registry.register_with_unit(
        "process_cpu",
        "CPU time cg-trace itself used",
        Unit::Seconds,
        counter(own.cpu_s),
    );
    registry.register_with_unit(
        "process_resident_memory",
        "cg-trace's own resident memory",
        Unit::Bytes,
        gauge(own.rss_bytes as f64),
    );
    registry
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
