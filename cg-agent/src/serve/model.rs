//! The exporter's books (`cg-trace serve`): each interval of a whole-machine session is split
//! by the accounting core ([`Attributor`]: the report's split, idle baselines fitted like the
//! live view's) and added to monotonic counters per energy domain and per process group, with
//! `idle`, `other` and `exited` as series of their own, so that in every scrape the series of
//! a domain add up to the host's measured total for it.
//!
//! Cardinality is bounded: at most `top_groups` groups are exported, chosen by their recent
//! energy; the energy of every other group goes to `other`. A group keeps its series until it
//! has had no live process and no CPU time for the grace period; its energy then moves to
//! `exited`. A group pushed out of the top by a bigger one hands its energy to `other`. So
//! every series only grows, and their sum is continuous: nothing jumps backwards mid-series.
//!
//! Memory does not grow with time or churn: a process is remembered while it lives (to count
//! its group's live members), a group while it lives or within its grace period.
//!
//! Pure: no I/O, no clocks; [`Exporter::scrape`] gives a [`Scrape`], which
//! [`super::metrics`] encodes.

use std::collections::HashMap;

/// The ways of grouping; serve offers [`GroupBy::SERIES`].
pub use crate::grouping::GroupBy;
use crate::{
    accounting::Attributor,
    attribution::{DomainSplit, ProcId},
    session::{
        SourceInfo,
        live::{LiveSample, LiveStart},
        processes::ProcessRecord,
    },
    sources::{DomainSpec, Provenance},
};

/// The series that are not process groups.
pub const IDLE: &str = "idle";
pub const OTHER: &str = "other";
pub const EXITED: &str = "exited";

/// Longest group label exported (a kernel command name has at most 15 bytes).
const MAX_GROUP_LEN: usize = 64;
/// How often the exported groups are chosen again.
const SELECT_EVERY_NS: u64 = 1_000_000_000;
/// Time constant of a group's recent energy (what the top is chosen by).
const RECENT_TAU_S: f64 = 60.0;
/// A group takes an exported group's place only with this many times its recent energy.
const EVICT_FACTOR: f64 = 2.0;
/// A source whose energy was unknown within this span is `degraded`.
const DEGRADED_FOR_NS: u64 = 60_000_000_000;

/// What `cg-trace serve` exports, and how much.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServeOptions {
    /// Groups exported with their own series.
    pub top_groups: usize,
    /// How long a group without live processes and CPU time keeps its series.
    pub grace_ns: u64,
    /// What makes a group.
    pub group_by: GroupBy,
}

/// A group's name and the labels its series carry besides it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupKey {
    pub name: String,
    pub container_id: Option<String>,
    pub pod_uid: Option<String>,
    pub systemd_unit: Option<String>,
}

impl GroupKey {
    fn named(name: String) -> Self {
        GroupKey {
            name,
            ..GroupKey::default()
        }
    }
}

/// Says which group a process belongs to (its cgroup as the process table read it, else
/// `/proc/PID/cgroup`, for [`GroupBy::Cgroup`]);
/// asked once per process, when it is first followed.
pub type Grouper = Box<dyn FnMut(&ProcessRecord) -> GroupKey + Send>;

/// The grouper of `group_by`, reading cgroups under `proc_root`.
pub fn grouper(group_by: GroupBy, proc_root: std::path::PathBuf) -> Grouper {
    match group_by {
        // `tree` and `none` are no ways of serve's series ([`GroupBy::SERIES`]): by name.
        GroupBy::Comm | GroupBy::Tree | GroupBy::None => Box::new(|r| GroupKey::named(group_of(r))),
        GroupBy::Cgroup | GroupBy::Unit => Box::new(move |r| {
            // The process table's reading (at discovery and at each exec, so a container's
            // payload is in its own cgroup) when it has one.
            let read = match &r.cgroup {
                Some(info) => Ok(info.clone()),
                None => crate::cgroup::of_pid(&proc_root, r.pid),
            };
            match read {
                Ok(info) if group_by == GroupBy::Unit => GroupKey {
                    name: fixed_apart(
                        info.systemd_unit
                            .clone()
                            .unwrap_or_else(|| "[no unit]".into()),
                    ),
                    systemd_unit: info.systemd_unit,
                    ..GroupKey::default()
                },
                Ok(info) => GroupKey {
                    name: fixed_apart(info.group_name()),
                    container_id: info.container_id,
                    pod_uid: info.pod_uid,
                    systemd_unit: info.systemd_unit,
                },
                // Gone before it was read (a short-lived process), or a file that does not
                // parse: said as such, never guessed.
                Err(_) => GroupKey::named("[unknown cgroup]".into()),
            }
        }),
    }
}

/// A name bounded in length and kept apart from the fixed series' names.
fn fixed_apart(mut name: String) -> String {
    if name.len() > MAX_GROUP_LEN {
        let mut end = MAX_GROUP_LEN;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    if [IDLE, OTHER, EXITED].contains(&name.as_str()) {
        name.push_str(" (process)");
    }
    name
}

/// One process group's books.
#[derive(Clone, Debug)]
struct Group {
    exported: bool,
    /// Per domain, since the group was exported.
    energy_j: Vec<f64>,
    /// Since the group was exported.
    cpu_ns: u64,
    /// Top-level energy, decaying with [`RECENT_TAU_S`].
    recent_j: f64,
    /// Live processes in the group.
    live: u32,
    /// Run time (ns) of the end of the last interval the group had CPU time in, or of its
    /// last process's exit.
    last_active_ns: u64,
    /// The labels besides its name.
    key: GroupKey,
}

impl Group {
    fn new(domains: usize, now_ns: u64) -> Self {
        Group {
            key: GroupKey::default(),
            exported: false,
            energy_j: vec![0.0; domains],
            cpu_ns: 0,
            recent_j: 0.0,
            live: 0,
            last_active_ns: now_ns,
        }
    }
}

/// A live process: who it is (a [`ProcId`] may be given to a later process) and its group.
#[derive(Clone, Debug, PartialEq)]
struct Member {
    pid: u32,
    first_seen_ns: u64,
    group: String,
}

/// Per domain, the series that are not groups, and the host's total.
#[derive(Clone, Debug, Default)]
struct DomainBooks {
    host_j: f64,
    idle_j: f64,
    other_j: f64,
    exited_j: f64,
    unknown_ns: u64,
    /// Run time of the last interval whose energy was partly unknown.
    last_unknown_ns: Option<u64>,
    last_power_w: f64,
}

/// The exporter's state; see the module docs.
pub struct Exporter {
    options: ServeOptions,
    grouper: Grouper,
    /// Groups of processes that ended before they were followed, for one interval.
    strays: HashMap<ProcId, GroupKey>,
    domains: Vec<DomainSpec>,
    top: Vec<usize>,
    sources: Vec<SourceInfo>,
    /// Attributes each interval with the idle baselines fitted so far.
    attributor: Attributor,
    intervals: u64,
    books: Vec<DomainBooks>,
    groups: HashMap<String, Group>,
    members: HashMap<ProcId, Member>,
    idle_cpu_ns: u64,
    other_cpu_ns: u64,
    exited_cpu_ns: u64,
    elapsed_ns: u64,
    last_select_ns: u64,
    /// Groups exported now.
    exported_count: usize,
    read_errors_count: u64,
    lost_events: u64,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("options", &self.options)
            .field("groups", &self.groups.len())
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

/// One scrape's figures, taken under the lock and encoded outside it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    pub domains: Vec<DomainRow>,
    /// `(domain index, group, joules)`: exported groups, then idle, other, exited.
    pub energy: Vec<(usize, String, f64)>,
    /// `(group, seconds)`: exported groups, then idle, other, exited.
    pub cpu: Vec<(String, f64)>,
    /// The labels of the exported groups (by cgroup or unit), by group name.
    pub labels: Vec<GroupKey>,
    pub sources: Vec<SourceRow>,
    pub elapsed_s: f64,
    pub intervals: u64,
    pub read_errors: u64,
    pub lost_events: u64,
    /// Process groups known now (exported or not).
    pub groups_known: usize,
    /// Live processes followed now.
    pub processes_live: usize,
}

/// One energy domain in a scrape.
#[derive(Clone, Debug, PartialEq)]
pub struct DomainRow {
    pub name: String,
    pub kind: String,
    pub provenance: Provenance,
    pub top_level: bool,
    pub host_j: f64,
    pub power_w: f64,
    pub idle_baseline_w: f64,
    pub idle_method: &'static str,
    pub unknown_s: f64,
}

/// One energy source in a scrape.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceRow {
    pub name: String,
    pub provenance: Provenance,
    /// `ok`, or `degraded` when one of its domains had unknown energy in the last minute.
    pub quality: &'static str,
}

/// Only finite, non-negative joules are added: a counter never goes back.
fn clean(j: f64) -> f64 {
    if j.is_finite() && j > 0.0 { j } else { 0.0 }
}

/// The group a process belongs to: its command name (`[unknown]` when it has none); a
/// command named like one of the fixed series gets ` (process)` added.
pub fn group_of(record: &ProcessRecord) -> String {
    fixed_apart(if record.comm.is_empty() {
        "[unknown]".to_string()
    } else {
        record.comm.clone()
    })
}

impl Exporter {
    /// An exporter grouping by command name, or by what `grouper` says.
    pub fn new(start: &LiveStart<'_>, options: ServeOptions) -> Self {
        Self::with_grouper(
            start,
            options,
            Box::new(|r: &ProcessRecord| GroupKey::named(group_of(r))),
        )
    }

    pub fn with_grouper(start: &LiveStart<'_>, options: ServeOptions, grouper: Grouper) -> Self {
        let header = start.header;
        let domains = header.baseline.domains.clone();
        Exporter {
            options,
            grouper,
            strays: HashMap::new(),
            top: (0..domains.len())
                .filter(|&d| domains[d].parent.is_none())
                .collect(),
            sources: header.sources.clone(),
            attributor: Attributor::new(header.baseline.clone(), start.calibration),
            intervals: 0,
            books: vec![DomainBooks::default(); domains.len()],
            groups: HashMap::new(),
            members: HashMap::new(),
            idle_cpu_ns: 0,
            other_cpu_ns: 0,
            exited_cpu_ns: 0,
            elapsed_ns: 0,
            last_select_ns: 0,
            exported_count: 0,
            read_errors_count: 0,
            lost_events: 0,
            domains,
        }
    }

    /// Follows the processes that started, exec'd or ended (`changed`, indexes into
    /// `processes`).
    fn follow(&mut self, processes: &[ProcessRecord], changed: &[ProcId], now_ns: u64) {
        for &id in changed {
            let Some(record) = processes.get(id as usize) else {
                continue;
            };
            let same = |m: &Member| m.pid == record.pid && m.first_seen_ns == record.first_seen_ns;
            if record.ended_ns.is_some() {
                if let Some(member) = self.members.get(&id).filter(|m| same(m)).cloned() {
                    self.members.remove(&id);
                    self.leave(&member.group, now_ns);
                }
                continue;
            }
            // Regrouped at every change: a command name changes with exec, and so can a
            // cgroup (a container runtime forks, moves the child into the container's cgroup,
            // then execs the entrypoint; the process table reads it again at exec).
            let key = if self.options.group_by == GroupBy::Comm {
                GroupKey::named(group_of(record))
            } else {
                (self.grouper)(record)
            };
            let group = key.name.clone();
            match self.members.get(&id) {
                Some(m) if same(m) && m.group == group => continue,
                Some(_) => {
                    // Exec'd into another group, or the id is another process's now.
                    if let Some(old) = self.members.remove(&id) {
                        self.leave(&old.group, now_ns);
                    }
                }
                None => {}
            }
            let domains = self.domains.len();
            let entry = self
                .groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(domains, now_ns));
            entry.live += 1;
            entry.key = key;
            self.members.insert(
                id,
                Member {
                    pid: record.pid,
                    first_seen_ns: record.first_seen_ns,
                    group,
                },
            );
        }
    }

    fn leave(&mut self, group: &str, now_ns: u64) {
        if let Some(g) = self.groups.get_mut(group) {
            g.live = g.live.saturating_sub(1);
            g.last_active_ns = g.last_active_ns.max(now_ns);
        }
    }

    /// The group of process `id` in this interval (creating it, with its labels).
    fn group_name(&mut self, id: ProcId, processes: &[ProcessRecord], now_ns: u64) -> String {
        if let Some(m) = self.members.get(&id) {
            return m.group.clone();
        }
        let key = match self.strays.get(&id) {
            Some(key) => key.clone(),
            None => {
                let key = match processes.get(id as usize) {
                    Some(r) if self.options.group_by == GroupBy::Comm => {
                        GroupKey::named(group_of(r))
                    }
                    Some(r) => (self.grouper)(r),
                    None => GroupKey::named("[unknown]".into()),
                };
                self.strays.insert(id, key.clone());
                key
            }
        };
        let domains = self.domains.len();
        let name = key.name.clone();
        self.groups.entry(name.clone()).or_insert_with(|| Group {
            key,
            ..Group::new(domains, now_ns)
        });
        name
    }

    /// Takes one interval of the session's live feed.
    pub fn add(&mut self, sample: &LiveSample<'_>) {
        let interval = sample.interval;
        let now_ns = interval.start_ns + interval.duration_ns;
        self.elapsed_ns = self.elapsed_ns.max(now_ns);
        self.read_errors_count = sample.read_errors_count;
        self.lost_events = sample.losses.total();
        self.strays.clear();
        self.follow(sample.processes, sample.changed, now_ns);

        self.intervals += 1;
        let splits = self.attributor.attribute(interval);
        for (d, split) in splits.iter().enumerate() {
            self.book_domain(d, split, sample, now_ns);
        }
        self.book_cpu_time(sample, now_ns);
        if now_ns.saturating_sub(self.last_select_ns) >= SELECT_EVERY_NS {
            let dt_s = now_ns.saturating_sub(self.last_select_ns) as f64 / 1e9;
            self.select(now_ns, dt_s);
            self.last_select_ns = now_ns;
        }
    }

    /// Adds domain `d`'s split of the interval to its groups and series (a group not
    /// exported adds to other).
    fn book_domain(&mut self, d: usize, split: &DomainSplit, sample: &LiveSample<'_>, now_ns: u64) {
        let interval = sample.interval;
        let measured_j = interval.energy_j.get(d).copied().unwrap_or(0.0);
        if !measured_j.is_finite() || measured_j < 0.0 {
            // The session hands over only known energy; anything else is unknown here.
            let books = &mut self.books[d];
            books.unknown_ns += interval.duration_ns;
            books.last_unknown_ns = Some(now_ns);
            books.last_power_w = 0.0;
            return;
        }
        let (domains, top_level) = (self.domains.len(), self.top.contains(&d));
        let mut other_j = clean(split.other_j);
        let idle_j = clean(split.idle_j);
        let mut total_j = idle_j + other_j;
        for &(id, joules) in &split.targets_j {
            let joules = clean(joules);
            total_j += joules;
            let name = self.group_name(id, sample.processes, now_ns);
            let group = self
                .groups
                .entry(name)
                .or_insert_with(|| Group::new(domains, now_ns));
            // While there is room, a group is exported from its first joule.
            if !group.exported && self.exported_count < self.options.top_groups {
                group.exported = true;
                self.exported_count += 1;
            }
            if group.exported {
                group.energy_j[d] += joules;
            } else {
                other_j += joules;
            }
            if top_level {
                group.recent_j += joules;
            }
        }
        let books = &mut self.books[d];
        // The host's figure is the sum of the parts added, so that the series add up to it
        // exactly (the split gives the remainder to other: they equal the measurement).
        books.host_j += total_j;
        books.idle_j += idle_j;
        books.other_j += other_j;
        let state = interval.energy_state(d);
        books.unknown_ns += state.unknown_ns;
        if state.unknown_ns > 0 || state.unknown_count > 0 {
            books.last_unknown_ns = Some(now_ns);
        }
        let known_ns = state.known_ns(interval.duration_ns);
        books.last_power_w = if known_ns > 0 {
            measured_j / (known_ns as f64 / 1e9)
        } else {
            0.0
        };
    }

    /// Adds the interval's CPU time to its groups (a group not exported adds to other), to
    /// other and to idle.
    fn book_cpu_time(&mut self, sample: &LiveSample<'_>, now_ns: u64) {
        let interval = sample.interval;
        let domains = self.domains.len();
        for slice in &interval.slices {
            let name = self.group_name(slice.process, sample.processes, now_ns);
            let group = self
                .groups
                .entry(name)
                .or_insert_with(|| Group::new(domains, now_ns));
            group.last_active_ns = now_ns;
            if group.exported {
                group.cpu_ns += slice.on_cpu_ns;
            } else {
                self.other_cpu_ns += slice.on_cpu_ns;
            }
        }
        for cpu in &interval.cpus {
            self.other_cpu_ns += cpu.other_ns;
            self.idle_cpu_ns += cpu.idle_ns.min(interval.duration_ns);
        }
    }

    /// Ends the series of groups gone for the grace period, and chooses the exported groups.
    fn select(&mut self, now_ns: u64, dt_s: f64) {
        let grace_ns = self.options.grace_ns;
        let books = &mut self.books;
        let exited_cpu_ns = &mut self.exited_cpu_ns;
        self.groups.retain(|_, g| {
            let gone = g.live == 0 && now_ns.saturating_sub(g.last_active_ns) >= grace_ns;
            if gone && g.exported {
                for (b, j) in books.iter_mut().zip(&g.energy_j) {
                    b.exited_j += j;
                }
                *exited_cpu_ns += g.cpu_ns;
            }
            !gone
        });
        let mut waiting: Vec<(f64, String)> = Vec::new();
        let mut exported: Vec<(f64, String)> = Vec::new();
        for (name, g) in &self.groups {
            if g.exported {
                exported.push((g.recent_j, name.clone()));
            } else if g.recent_j > 0.0 {
                waiting.push((g.recent_j, name.clone()));
            }
        }
        waiting.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        exported.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
        for (recent_j, name) in waiting {
            if exported.len() >= self.options.top_groups {
                // The weakest exported group makes way for a much bigger one.
                let Some((weakest_j, _)) = exported.last() else {
                    break;
                };
                if recent_j <= EVICT_FACTOR * weakest_j {
                    break;
                }
                let Some((_, victim)) = exported.pop() else {
                    break;
                };
                if let Some(g) = self.groups.get_mut(&victim) {
                    for (b, j) in self.books.iter_mut().zip(&mut g.energy_j) {
                        b.other_j += *j;
                        *j = 0.0;
                    }
                    self.other_cpu_ns += g.cpu_ns;
                    g.cpu_ns = 0;
                    g.exported = false;
                }
            }
            if let Some(g) = self.groups.get_mut(&name) {
                g.exported = true;
            }
            let at = exported
                .iter()
                .position(|(j, _)| *j < recent_j)
                .unwrap_or(exported.len());
            exported.insert(at, (recent_j, name));
        }
        self.exported_count = exported.len();
        let decay = (-dt_s / RECENT_TAU_S).exp();
        for g in self.groups.values_mut() {
            g.recent_j *= decay;
        }
    }

    /// The figures now.
    pub fn scrape(&self) -> Scrape {
        let baselines = self.attributor.baselines();
        let mut names: Vec<(&String, &Group)> =
            self.groups.iter().filter(|(_, g)| g.exported).collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        let mut energy = Vec::new();
        for d in 0..self.domains.len() {
            for (name, g) in &names {
                energy.push((d, (*name).clone(), g.energy_j[d]));
            }
            let b = &self.books[d];
            energy.push((d, IDLE.to_string(), b.idle_j));
            energy.push((d, OTHER.to_string(), b.other_j));
            energy.push((d, EXITED.to_string(), b.exited_j));
        }
        let mut cpu: Vec<(String, f64)> = names
            .iter()
            .map(|(name, g)| ((*name).clone(), g.cpu_ns as f64 / 1e9))
            .collect();
        cpu.push((IDLE.to_string(), self.idle_cpu_ns as f64 / 1e9));
        cpu.push((OTHER.to_string(), self.other_cpu_ns as f64 / 1e9));
        cpu.push((EXITED.to_string(), self.exited_cpu_ns as f64 / 1e9));
        let degraded = |d: usize| {
            self.books[d]
                .last_unknown_ns
                .is_some_and(|t| self.elapsed_ns.saturating_sub(t) < DEGRADED_FOR_NS)
        };
        Scrape {
            labels: names.iter().map(|(_, g)| g.key.clone()).collect(),
            domains: self
                .domains
                .iter()
                .enumerate()
                .map(|(d, spec)| DomainRow {
                    name: spec.name.clone(),
                    kind: format!("{:?}", spec.kind).to_lowercase(),
                    provenance: spec.provenance,
                    top_level: spec.parent.is_none(),
                    host_j: self.books[d].host_j,
                    power_w: self.books[d].last_power_w,
                    idle_baseline_w: baselines.get(d).map_or(0.0, |b| b.power_w),
                    idle_method: baselines.get(d).map_or("none", |b| b.method.name()),
                    unknown_s: self.books[d].unknown_ns as f64 / 1e9,
                })
                .collect(),
            energy,
            cpu,
            sources: self
                .sources
                .iter()
                .map(|s| SourceRow {
                    name: s.name.to_string(),
                    provenance: s.provenance,
                    quality: if self
                        .domains
                        .iter()
                        .enumerate()
                        .any(|(d, spec)| s.domains.contains(&spec.name) && degraded(d))
                    {
                        "degraded"
                    } else {
                        "ok"
                    },
                })
                .collect(),
            elapsed_s: self.elapsed_ns as f64 / 1e9,
            intervals: self.intervals,
            read_errors: self.read_errors_count,
            lost_events: self.lost_events,
            groups_known: self.groups.len(),
            processes_live: self.members.len(),
        }
    }

    /// Groups and live processes remembered now (what memory grows with).
    pub fn remembered(&self) -> (usize, usize) {
        (self.groups.len(), self.members.len())
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, time::Duration};

    use super::*;
    use crate::{
        attribution::{Coverage, CpuTime, Interval, Slice, unknown::Glitch},
        host::HostInfo,
        probes::Losses,
        session::{IdleWatts, Mode, RunHeader},
        sources::DomainKind,
    };

    const MS: u64 = 1_000_000;

    fn domain(name: &str, kind: DomainKind, parent: Option<&str>) -> DomainSpec {
        DomainSpec {
            name: name.into(),
            kind,
            parent: parent.map(str::to_string),
            coverage: Coverage::AllCpus,
            provenance: Provenance::Measured,
            source: "powercap",
        }
    }

    fn header(idle_w: f64) -> RunHeader {
        RunHeader {
            mode: Mode::System,
            host: HostInfo::two_cpu_test_host(),
            sources: vec![SourceInfo {
                name: "powercap",
                provenance: Provenance::Measured,
                description: "test".into(),
                domains: vec!["package-0".into(), "core-0".into()],
            }],
            selection_reason: "test".into(),
            baseline: crate::accounting::BaselineInputs {
                domains: vec![
                    domain("package-0", DomainKind::Package, None),
                    domain("core-0", DomainKind::Core, Some("package-0")),
                ],
                idle_watts: IdleWatts::Estimate,
                known_idle_w: vec![Some(idle_w), Some(idle_w / 2.0)],
                rest_power: Vec::new(),
                busy_slope_w: vec![],
                interval: Duration::from_millis(100),
                prior_slope_w_per_cpu: 5.0,
            },
        }
    }

    fn exporter(top_groups: usize, grace_s: u64) -> Exporter {
        let header = header(2.0);
        Exporter::new(
            &LiveStart {
                header: &header,
                run_start_ns: 0,
                calibration: &[],
            },
            ServeOptions {
                top_groups,
                grace_ns: grace_s * 1_000 * MS,
                group_by: GroupBy::Comm,
            },
        )
    }

    /// An exporter grouping by cgroup, reading `/proc` under `proc_root` where the process
    /// table read nothing.
    fn cgroup_exporter(proc_root: std::path::PathBuf) -> Exporter {
        let header = header(2.0);
        Exporter::with_grouper(
            &LiveStart {
                header: &header,
                run_start_ns: 0,
                calibration: &[],
            },
            ServeOptions {
                top_groups: 10,
                grace_ns: 60_000 * MS,
                group_by: GroupBy::Cgroup,
            },
            grouper(GroupBy::Cgroup, proc_root),
        )
    }

    fn record(pid: u32, comm: &str, first_seen_ns: u64) -> ProcessRecord {
        ProcessRecord {
            pid,
            ppid: Some(1),
            comm: comm.into(),
            cmdline: vec![],
            uid: Some(0),
            first_seen_ns,
            start_ns: None,
            ended_ns: None,
            ending: None,
            root: false,
            cgroup: None,
            thread_names: Default::default(),
        }
    }

    /// Interval `i` (100 ms): each `(process, cpu, ms)` ran; the rest of each CPU is other
    /// for 5 ms and idle.
    fn interval(i: u64, runs: &[(ProcId, u32, u64)], energy_j: [f64; 2]) -> Interval {
        let mut cpus = vec![
            CpuTime {
                idle_ns: 95 * MS,
                other_ns: 5 * MS,
            };
            2
        ];
        let mut slices = Vec::new();
        for &(process, cpu, ms) in runs {
            cpus[cpu as usize].idle_ns = cpus[cpu as usize].idle_ns.saturating_sub(ms * MS);
            slices.push(Slice {
                process,
                tid: process,
                cpu,
                on_cpu_ns: ms * MS,
            });
        }
        Interval {
            start_ns: i * 100 * MS,
            duration_ns: 100 * MS,
            cpus,
            slices,
            energy_j: energy_j.to_vec(),
            ..Interval::default()
        }
    }

    fn feed(e: &mut Exporter, processes: &[ProcessRecord], changed: &[ProcId], iv: &Interval) {
        e.add(&LiveSample {
            interval: iv,
            processes,
            changed,
            losses: Losses::default(),
            read_errors_count: 0,
            functions: None,
        });
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    /// Per domain: the sum of its series; per (domain, group): the value.
    fn series(s: &Scrape) -> (Vec<f64>, BTreeMap<(usize, String), f64>) {
        let mut sums = vec![0.0; s.domains.len()];
        let mut values = BTreeMap::new();
        for (d, group, j) in &s.energy {
            sums[*d] += j;
            assert!(
                values.insert((*d, group.clone()), *j).is_none(),
                "one series per domain and group: {group}"
            );
        }
        (sums, values)
    }

    /// Every scrape: the series of each domain add up to its host total, no series went
    /// back, and the totals grew by what was measured. Groups come and go (churn, pid reuse,
    /// a reused ProcId, exec into another group), more groups than exported.
    #[test]
    fn series_add_up_to_the_host_total_in_every_scrape_and_never_go_back() {
        let mut e = exporter(3, 1);
        let mut processes: Vec<ProcessRecord> = Vec::new();
        let mut previous: Option<BTreeMap<(usize, String), f64>> = None;
        let mut measured = [0.0, 0.0];
        for i in 0..400u64 {
            let mut changed = Vec::new();
            // A long-lived busy daemon (id 0), and a short job every interval with one of 7
            // names, each living 3 intervals; from interval 200 on, ids are reused.
            if i == 0 {
                processes.push(record(100, "daemon", 0));
                changed.push(0);
            }
            let name = ["make", "cc1", "ld", "sh", "grep", "sed", "awk"][(i % 7) as usize];
            let id = if i >= 200 {
                let id = 1 + (i % 5) as ProcId;
                processes[id as usize] = record(1000 + i as u32 % 50, name, i * 100 * MS);
                id
            } else {
                processes.push(record(1000 + i as u32 % 50, name, i * 100 * MS));
                processes.len() as ProcId - 1
            };
            changed.push(id);
            // The job of 3 intervals ago ends (when its id was not taken since).
            if (3..200).contains(&i) {
                let old = processes.len() - 4;
                processes[old].ended_ns = Some(i * 100 * MS);
                changed.push(old as ProcId);
            }
            // The daemon exec's into another name half-way.
            if i == 150 {
                processes[0].comm = "daemon2".into();
                changed.push(0);
            }
            let energy = [
                3.0 + (i % 5) as f64 * 0.1,
                if i == 77 { f64::NAN } else { 1.0 },
            ];
            let iv = interval(i, &[(0, 0, 60), (id, 1, 30 + i % 40)], energy);
            measured[0] += energy[0];
            if energy[1].is_finite() {
                measured[1] += energy[1];
            }
            feed(&mut e, &processes, &changed, &iv);
            let scrape = e.scrape();
            let (sums, values) = series(&scrape);
            for (d, row) in scrape.domains.iter().enumerate() {
                assert!(
                    close(sums[d], row.host_j),
                    "interval {i}, {}: series {} J, host {} J",
                    row.name,
                    sums[d],
                    row.host_j
                );
                assert!(close(row.host_j, measured[d]), "interval {i}: {}", row.name);
            }
            let groups = values.keys().filter(|(d, _)| *d == 0).count();
            assert!(groups <= 3 + 3, "interval {i}: {groups} series");
            if let Some(previous) = &previous {
                for (key, value) in &values {
                    if let Some(before) = previous.get(key) {
                        assert!(value >= before, "interval {i}: {key:?} went back");
                    }
                }
            }
            previous = Some(values);
        }
        let last = e.scrape();
        assert!(
            last.energy
                .iter()
                .any(|(_, g, j)| g == "daemon2" && *j > 0.0)
        );
        assert!(last.energy.iter().any(|(_, g, j)| g == EXITED && *j > 0.0));
        // CPU seconds: every CPU's time, once (2 CPUs x 40 s).
        let cpu_s: f64 = last.cpu.iter().map(|(_, s)| s).sum();
        assert!(close(cpu_s, 80.0), "{cpu_s}");
    }

    #[test]
    fn the_grouper_takes_the_cgroup_the_process_table_read() {
        // Read at exec by the table (the payload in its container), where /proc has nothing.
        let mut r = record(42, "nginx", 0);
        let id = "3f4e1b2c5d6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c";
        r.cgroup = Some(crate::cgroup::classify(&format!(
            "/system.slice/docker-{id}.scope"
        )));
        let mut by_cgroup = grouper(GroupBy::Cgroup, "/nonexistent/proc".into());
        let key = by_cgroup(&r);
        assert_eq!(key.name, "docker:3f4e1b2c5d6a");
        assert_eq!(key.container_id.as_deref(), Some(id));
        // Without the table's reading, /proc is asked (here: nothing there).
        r.cgroup = None;
        assert_eq!(by_cgroup(&r).name, "[unknown cgroup]");
    }

    /// Grouped by cgroup (read once per process from a `/proc` tree shaped like a docker
    /// and a Kubernetes node's), the series carry the container id, pod UID and unit.
    #[test]
    fn grouped_by_cgroup_the_series_carry_container_and_pod_labels() {
        let proc_root = tempfile::tempdir().unwrap();
        let docker = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let pod = "4f1c5d2e-8a7b-4c3d-9e0f-1a2b3c4d5e6f";
        let files = [
            (10, format!("0::/system.slice/docker-{docker}.scope\n")),
            (
                11,
                format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{docker}.scope\n",
                    pod.replace('-', "_")
                ),
            ),
            (12, "0::/system.slice/nginx.service\n".to_string()),
        ];
        for (pid, text) in &files {
            let dir = proc_root.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cgroup"), text).unwrap();
        }
        let mut e = cgroup_exporter(proc_root.path().to_path_buf());
        // 13 has no cgroup file: gone before it was read.
        let processes: Vec<ProcessRecord> = [10, 11, 12, 13]
            .iter()
            .map(|&pid| record(pid, "x", 0))
            .collect();
        for i in 0..3 {
            let changed: &[ProcId] = if i == 0 { &[0, 1, 2, 3] } else { &[] };
            let runs = [(0, 0, 10), (1, 0, 20), (2, 1, 30), (3, 1, 5)];
            feed(&mut e, &processes, changed, &interval(i, &runs, [3.0, 1.0]));
        }
        let scrape = e.scrape();
        let key = |name: &str| scrape.labels.iter().find(|k| k.name == name).cloned();
        let d = key(&format!("docker:{}", &docker[..12])).expect("docker group");
        assert_eq!(d.container_id.as_deref(), Some(docker));
        let k = scrape
            .labels
            .iter()
            .find(|k| k.pod_uid.as_deref() == Some(pod))
            .expect("pod group");
        assert_eq!(k.container_id.as_deref(), Some(docker));
        assert_eq!(
            key("nginx.service").and_then(|k| k.systemd_unit),
            Some("nginx.service".into())
        );
        assert!(key("[unknown cgroup]").is_some());
        let text = super::super::metrics::openmetrics(&scrape, Default::default());
        assert!(
            text.contains(&format!("container_id=\"{docker}\"")),
            "{text}"
        );
        assert!(text.contains(&format!("pod_uid=\"{pod}\"")), "{text}");
        let (sums, _) = series(&scrape);
        assert!(close(sums[0], scrape.domains[0].host_j));
    }

    /// A container runtime forks (the child still in the runtime's cgroup), moves the child
    /// into the container's cgroup, then execs the entrypoint: seen first at the fork, the
    /// process is charged to the container from its exec on.
    ///
    /// ```text
    /// interval   0            1            2
    /// pid 20     fork (runc)  exec (nginx: container's cgroup)
    /// group      runc.scope   docker:...   docker:...
    /// ```
    #[test]
    fn a_process_seen_at_fork_joins_the_container_it_execs_in() {
        let docker = "89abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234567";
        let mut e = cgroup_exporter("/nonexistent/proc".into());
        let mut processes = vec![record(20, "runc:[2:INIT]", 0)];
        processes[0].cgroup = Some(crate::cgroup::classify("/system.slice/runc-init.scope"));
        feed(
            &mut e,
            &processes,
            &[0],
            &interval(0, &[(0, 0, 50)], [2.0, 1.0]),
        );
        // The exec: the table read the cgroup again.
        processes[0].comm = "nginx".into();
        processes[0].cgroup = Some(crate::cgroup::classify(&format!(
            "/system.slice/docker-{docker}.scope"
        )));
        for i in 1..3 {
            let changed: &[ProcId] = if i == 1 { &[0] } else { &[] };
            feed(
                &mut e,
                &processes,
                changed,
                &interval(i, &[(0, 0, 50)], [2.0, 1.0]),
            );
        }
        let scrape = e.scrape();
        let energy = |name: &str| -> f64 {
            scrape
                .energy
                .iter()
                .filter(|(d, g, _)| *d == 0 && g == name)
                .map(|(_, _, j)| *j)
                .sum()
        };
        let container = format!("docker:{}", &docker[..12]);
        let runtime = energy("runc-init.scope");
        assert!(energy(&container) > runtime, "{scrape:?}");
        // Two intervals in the container against one in the runtime's group (2.0 J active
        // of 3.0 J each, the baseline fit aside, the ratio holds).
        assert!(close(energy(&container), 2.0 * runtime), "{scrape:?}");
    }

    #[test]
    fn a_group_gone_for_the_grace_period_moves_to_exited() {
        let mut e = exporter(5, 2);
        let mut processes = vec![record(10, "job", 0), record(11, "sleeper", 0)];
        for i in 0..10 {
            let changed: &[ProcId] = if i == 0 { &[0, 1] } else { &[] };
            feed(
                &mut e,
                &processes,
                changed,
                &interval(i, &[(0, 0, 50)], [2.0, 1.0]),
            );
        }
        let before = e.scrape();
        let job_j = before
            .energy
            .iter()
            .find(|(d, g, _)| *d == 0 && g == "job")
            .map(|(_, _, j)| *j)
            .expect("job exported");
        assert!(job_j > 0.0);
        processes[0].ended_ns = Some(1_000 * MS);
        // Still exported during the grace period, then its energy is exited's.
        feed(&mut e, &processes, &[0], &interval(10, &[], [1.0, 0.5]));
        assert!(e.scrape().energy.iter().any(|(_, g, _)| g == "job"));
        for i in 11..40 {
            feed(&mut e, &processes, &[], &interval(i, &[], [1.0, 0.5]));
        }
        let after = e.scrape();
        assert!(!after.energy.iter().any(|(_, g, _)| g == "job"));
        let exited = after
            .energy
            .iter()
            .find(|(d, g, _)| *d == 0 && g == EXITED)
            .map(|(_, _, j)| *j)
            .unwrap();
        assert!(close(exited, job_j), "{exited} vs {job_j}");
        // A sleeping process keeps its group alive (it never ran: never exported).
        assert_eq!(e.remembered(), (1, 1));
    }

    #[test]
    fn only_the_top_groups_are_exported_and_a_much_bigger_one_takes_a_place() {
        let mut e = exporter(2, 600);
        let processes: Vec<ProcessRecord> = ["a", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, n)| record(10 + i as u32, n, 0))
            .collect();
        for i in 0..20 {
            let changed: &[ProcId] = if i == 0 { &[0, 1, 2, 3] } else { &[] };
            let runs = [(0, 0, 40), (1, 0, 30), (2, 1, 2), (3, 1, 1)];
            feed(&mut e, &processes, changed, &interval(i, &runs, [3.0, 1.0]));
        }
        let exported = |s: &Scrape| -> Vec<String> {
            let mut g: Vec<String> = s
                .energy
                .iter()
                .filter(|(d, g, _)| *d == 0 && ![IDLE, OTHER, EXITED].contains(&g.as_str()))
                .map(|(_, g, _)| g.clone())
                .collect();
            g.sort();
            g
        };
        assert_eq!(exported(&e.scrape()), ["a", "b"]);
        // d becomes by far the biggest: it takes b's place; b's energy goes to other.
        let other_before = e.scrape().energy[3].2;
        for i in 20..200 {
            let runs = [(0, 0, 40), (1, 0, 10), (3, 1, 90)];
            feed(&mut e, &processes, &[], &interval(i, &runs, [3.0, 1.0]));
        }
        let s = e.scrape();
        assert_eq!(exported(&s), ["a", "d"]);
        let other_after = s
            .energy
            .iter()
            .find(|(d, g, _)| *d == 0 && g == OTHER)
            .unwrap()
            .2;
        assert!(other_after > other_before);
    }

    #[test]
    fn churn_of_a_million_processes_leaves_nothing_behind() {
        let mut e = exporter(10, 1);
        let mut processes = vec![record(1, "init", 0)];
        feed(&mut e, &processes, &[0], &interval(0, &[], [1.0, 0.5]));
        for i in 1..20_000u64 {
            // 50 processes per interval, each with a name of its own, start, run and end.
            processes.truncate(1);
            let mut changed = Vec::new();
            let mut runs = Vec::new();
            for k in 0..50u64 {
                let mut r = record((i * 50 + k) as u32, &format!("job{}", i * 50 + k), i);
                r.ended_ns = Some(i * 100 * MS);
                processes.push(r);
                changed.push(processes.len() as ProcId - 1);
                runs.push((processes.len() as ProcId - 1, (k % 2) as u32, 1));
            }
            feed(
                &mut e,
                &processes,
                &changed,
                &interval(i, &runs, [1.0, 0.5]),
            );
        }
        let (groups, live) = e.remembered();
        assert_eq!(live, 1);
        // Groups are kept for the grace period (1 s: 10 intervals of 50 names) at most.
        assert!(groups <= 50 * 12, "{groups} groups remembered");
        let s = e.scrape();
        let (sums, _) = series(&s);
        assert!(close(sums[0], s.domains[0].host_j));
    }

    #[test]
    fn unknown_and_glitched_energy_adds_nothing_and_degrades_the_source() {
        let mut e = exporter(5, 60);
        let processes = vec![record(10, "job", 0)];
        feed(
            &mut e,
            &processes,
            &[0],
            &interval(0, &[(0, 0, 50)], [2.0, 1.0]),
        );
        let before = e.scrape();
        assert_eq!(before.sources[0].quality, "ok");
        let mut glitched = interval(1, &[(0, 0, 50)], [-5.0, f64::INFINITY]);
        glitched.energy_state = vec![
            crate::attribution::EnergyState::unknown(100 * MS, Glitch::Invalid),
            crate::attribution::EnergyState::unknown(100 * MS, Glitch::Invalid),
        ];
        glitched.energy_j = vec![0.0, 0.0];
        feed(&mut e, &processes, &[], &glitched);
        let mut wild = interval(2, &[(0, 0, 50)], [f64::NAN, -1.0]);
        wild.energy_j = vec![f64::NAN, -1.0];
        feed(&mut e, &processes, &[], &wild);
        let after = e.scrape();
        for (b, a) in before.energy.iter().zip(&after.energy) {
            assert_eq!(b.1, a.1);
            assert!(a.2 >= b.2 && a.2.is_finite(), "{a:?}");
        }
        assert_eq!(after.sources[0].quality, "degraded");
        // Both intervals: the one whose energy the session said unknown, the NaN one.
        assert!(close(after.domains[0].unknown_s, 0.2));
        let (sums, _) = series(&after);
        assert!(close(sums[0], after.domains[0].host_j));
    }
}
