//! RAPL energy counters through the powercap sysfs interface (`/sys/class/powercap`).
//!
//! Zones are directories named `intel-rapl:P` (top level: `package-N` or `psys`) and
//! `intel-rapl:P:S` (inside zone P: `core`, `uncore`, `dram`), each with `name`, `energy_uj`
//! and `max_energy_range_uj`. Nesting, as the report's domain topology records it:
//! `core-N` and `uncore-N` are inside `package-N`; `dram-N` is not inside the package (sysfs
//! lists it as a sub-zone, but RAPL counts it separately); `psys`, when present, covers the
//! packages and DRAM. `intel-rapl-mmio:*` zones duplicate MSR packages and are used only when
//! no MSR zone has the same name.

use std::{
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use super::{
    DomainKind, DomainSpec, EnergySource, Provenance, ReadContext, Reading, SourceError,
    SourceNote, SourceSummary, busy_cpus,
    counter::{self, CheckedCounter, FreezeWatch, Judged},
    human_duration,
};
use crate::{
    attribution::{Coverage, Glitch},
    host::HostInfo,
};

/// Where the kernel exposes powercap zones.
pub const DEFAULT_ROOT: &str = "/sys/class/powercap";

/// Every this many reads, each zone's `energy_uj` path is checked for a new file (it is also
/// checked at once after a suspicious reading: no movement, a glitch, a failed read).
pub const REOPEN_CHECK_READS: u32 = 10;

/// RAPL's bursts (PL2, PL4) run above the largest power limit the hardware lets one set: the
/// plausible power of a zone with `constraint_*_max_power_uw` is this many times that.
const HARDWARE_LIMIT_MARGIN: f64 = 10.0;

/// One readable zone. Its `energy_uj` stays open: reading a sysfs attribute again from offset
/// 0 yields a fresh value, at one syscall per zone and interval instead of three. The path is
/// checked now and then for a new file (a zone deleted and recreated), which is then reopened.
#[derive(Debug)]
struct Zone {
    energy_path: PathBuf,
    energy_file: fs::File,
    /// (st_dev, st_ino) of the open file.
    identity: (u64, u64),
    counter: CheckedCounter,
    /// `None` for zones whose energy does not follow the CPUs (uncore: an integrated GPU).
    freeze: Option<FreezeWatch>,
    coverage: Coverage,
    reads_since_check: u32,
    /// The file was reopened during a read that then failed: the next reading is unknown.
    replaced_unread: bool,
    replaced_count: u32,
    /// The first glitch of each kind, described, for the report's notes.
    first_glitches: Vec<(Glitch, String)>,
}

impl Zone {
    fn open(
        energy_path: PathBuf,
        counter: CheckedCounter,
        spec: &DomainSpec,
    ) -> Result<Self, SourceError> {
        let energy_file = fs::File::open(&energy_path).map_err(|err| match err.kind() {
            io::ErrorKind::NotFound => malformed(&energy_path, "missing"),
            _ => unreadable(&energy_path, &err),
        })?;
        let identity = file_identity(&energy_file, &energy_path)?;
        let mut zone = Zone {
            energy_path,
            energy_file,
            identity,
            counter,
            freeze: (spec.kind != DomainKind::Uncore).then(FreezeWatch::default),
            coverage: spec.coverage.clone(),
            reads_since_check: 0,
            replaced_unread: false,
            replaced_count: 0,
            first_glitches: Vec::new(),
        };
        let first = read_u64_at(&zone.energy_file, &zone.energy_path)?;
        zone.counter.reset(first);
        Ok(zone)
    }

    /// Whether the path still names the file open: else it was deleted (`Gone`: not
    /// recreated yet) or replaced (`Reopened`: the new file is open now, its value the
    /// counter's origin).
    fn reopen_if_replaced(&mut self) -> Result<OnPath, SourceError> {
        self.reads_since_check = 0;
        let on_path = match fs::metadata(&self.energy_path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(OnPath::Gone),
            Err(err) => return Err(unreadable(&self.energy_path, &err)),
        };
        if (on_path.dev(), on_path.ino()) == self.identity {
            return Ok(OnPath::Same);
        }
        let file =
            fs::File::open(&self.energy_path).map_err(|err| unreadable(&self.energy_path, &err))?;
        let identity = file_identity(&file, &self.energy_path)?;
        let value = read_u64_at(&file, &self.energy_path)?;
        tracing::warn!(
            "powercap: {} was replaced (a new file); reopened it",
            self.energy_path.display()
        );
        self.energy_file = file;
        self.identity = identity;
        self.counter.reset(value);
        self.replaced_count += 1;
        self.replaced_unread = true;
        if let Some(f) = self.freeze.as_mut() {
            f.interrupt();
        }
        Ok(OnPath::Reopened)
    }

    /// Reads the counter's value; a failed read is retried once on a replaced file.
    fn read_value(&mut self) -> Result<u64, SourceError> {
        self.reads_since_check += 1;
        match read_u64_at(&self.energy_file, &self.energy_path) {
            Ok(value) => Ok(value),
            Err(err) => match self.reopen_if_replaced() {
                Ok(OnPath::Reopened) => Ok(self.counter_origin()),
                Ok(OnPath::Same | OnPath::Gone) | Err(_) => Err(err),
            },
        }
    }

    fn counter_origin(&self) -> u64 {
        self.counter.last().unwrap_or(0)
    }

    /// Judges `value` (read over `ctx`) into this interval's reading.
    fn judge(&mut self, value: u64, ctx: &ReadContext<'_>) -> Reading {
        if std::mem::take(&mut self.replaced_unread) {
            self.counter.reset(value);
            return Reading::unknown(Glitch::Replaced);
        }
        let advanced = self.counter.advance(value, ctx.duration_ns);
        let suspicious = ctx.duration_ns > 0
            && (self.reads_since_check >= REOPEN_CHECK_READS
                || !matches!(advanced, Ok(j) if j > 0.0));
        if suspicious {
            match self.reopen_if_replaced() {
                Ok(OnPath::Reopened) => {
                    // The reading came from the old file: what happened since is unknown.
                    self.replaced_unread = false;
                    return Reading::unknown(Glitch::Replaced);
                }
                // Deleted and not back yet: the open file no longer moves.
                Ok(OnPath::Gone) => {
                    if let Some(f) = self.freeze.as_mut() {
                        f.interrupt();
                    }
                    return Reading::unknown(Glitch::Deleted);
                }
                Ok(OnPath::Same) | Err(_) => {}
            }
        }
        match advanced {
            Ok(joules) => match self.freeze.as_mut() {
                Some(freeze) => {
                    let busy = busy_cpus(ctx, &self.coverage);
                    let reading = freeze.observe(joules, ctx.duration_ns, busy);
                    if let Reading::Unknown(u) = reading
                        && !self.first_glitches.iter().any(|(g, _)| *g == u.glitch)
                    {
                        self.first_glitches.push((
                            u.glitch,
                            format!(
                                "{} stopped at {value} µJ while {busy:.1} CPUs were busy \
                                 (found frozen after {})",
                                self.energy_path.display(),
                                human_duration(u.earlier_ns + ctx.duration_ns)
                            ),
                        ));
                    }
                    reading
                }
                None => Reading::Joules(joules),
            },
            Err((glitch, judged)) => {
                if let Some(f) = self.freeze.as_mut() {
                    f.interrupt();
                }
                if !self.first_glitches.iter().any(|(g, _)| *g == glitch) {
                    self.first_glitches.push((
                        glitch,
                        describe_glitch(
                            &self.energy_path,
                            glitch,
                            &judged,
                            ctx.duration_ns,
                            self.counter.max_power_w(),
                        ),
                    ));
                }
                Reading::unknown(glitch)
            }
        }
    }
}

/// What a zone's path names, compared with the file open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnPath {
    Same,
    Reopened,
    Gone,
}

/// The first glitch of a kind, in words with its figures.
fn describe_glitch(
    path: &Path,
    glitch: Glitch,
    j: &Judged,
    duration_ns: u64,
    max_power_w: f64,
) -> String {
    let implied_w = j.joules / (duration_ns.max(1) as f64 / 1e9);
    let what = match glitch {
        Glitch::StepBack => "stepped back",
        Glitch::Jump => "jumped",
        Glitch::Ambiguous => "may have wrapped more than once",
        _ => "misread",
    };
    format!(
        "{} {what} from {} to {} µJ in {} (as an advance: {:.0} J, {}; at most {:.0} W is plausible)",
        path.display(),
        j.previous,
        j.value,
        human_duration(duration_ns),
        j.joules,
        human_power(implied_w),
        max_power_w
    )
}

/// Watts in the unit a person reads: `950 W`, `19.9 kW`, `2.6 MW`.
pub fn human_power(w: f64) -> String {
    if !w.is_finite() {
        "an unbounded power".into()
    } else if w >= 1e6 {
        format!("{:.1} MW", w / 1e6)
    } else if w >= 1e3 {
        format!("{:.1} kW", w / 1e3)
    } else {
        format!("{w:.0} W")
    }
}

fn file_identity(file: &fs::File, path: &Path) -> Result<(u64, u64), SourceError> {
    let meta = file.metadata().map_err(|err| unreadable(path, &err))?;
    Ok((meta.dev(), meta.ino()))
}

/// The most power a zone can draw: from its largest `constraint_N_max_power_uw` where the
/// hardware gives one (times a margin for RAPL's bursts), never above the default for its
/// kind ([`counter::max_power_w`]).
fn zone_max_power_w(dir: &Path, kind: DomainKind) -> f64 {
    let default = counter::max_power_w(kind);
    let hardware_uw = (0..8)
        .filter_map(|n| {
            let path = dir.join(format!("constraint_{n}_max_power_uw"));
            fs::read_to_string(path).ok()?.trim().parse::<u64>().ok()
        })
        .filter(|&uw| uw > 0)
        .max();
    match hardware_uw {
        Some(uw) => (uw as f64 / 1e6 * HARDWARE_LIMIT_MARGIN).min(default),
        None => default,
    }
}

/// RAPL through powercap.
#[derive(Debug)]
pub struct PowercapSource {
    root: PathBuf,
    zones: Vec<Zone>,
    domains: Vec<DomainSpec>,
}

/// A zone as found on disk, before reading its counter.
#[derive(Clone, Debug, PartialEq)]
struct FoundZone {
    dir: PathBuf,
    /// `intel-rapl:0:1` -> (Some("intel-rapl"), [0, 1]).
    path_ids: Vec<u32>,
    mmio: bool,
    name: String,
}

impl PowercapSource {
    /// Discovers the zones under `root`, checks every counter can be read, and takes the first
    /// reading (so the first [`EnergySource::read`] returns the energy since opening).
    pub fn open(root: &Path, host: &HostInfo) -> Result<Self, SourceError> {
        let found = discover(root)?;
        let has_psys = found.iter().any(|z| z.name == "psys");
        let mut zones = Vec::new();
        let mut domains = Vec::new();
        for zone in &found {
            let spec = domain_for(zone, &found, has_psys, host)?;
            if domains.iter().any(|d: &DomainSpec| d.name == spec.name) {
                continue; // an mmio duplicate of an MSR zone
            }
            let max_path = zone.dir.join("max_energy_range_uj");
            let max = read_u64(&max_path)?;
            if max == 0 {
                return Err(malformed(&max_path, "max_energy_range_uj is 0"));
            }
            let counter = CheckedCounter::new(max, 1e-6, zone_max_power_w(&zone.dir, spec.kind));
            zones.push(Zone::open(zone.dir.join("energy_uj"), counter, &spec)?);
            domains.push(spec);
        }
        Ok(PowercapSource {
            root: root.to_path_buf(),
            zones,
            domains,
        })
    }
}

/// The domains under `root` without reading any counter (`cg-trace sources` lists them even
/// when `energy_uj` is root-only).
pub fn discover_domains(root: &Path, host: &HostInfo) -> Result<Vec<DomainSpec>, SourceError> {
    let found = discover(root)?;
    let has_psys = found.iter().any(|z| z.name == "psys");
    let mut domains: Vec<DomainSpec> = Vec::new();
    for zone in &found {
        let spec = domain_for(zone, &found, has_psys, host)?;
        if !domains.iter().any(|d| d.name == spec.name) {
            domains.push(spec);
        }
    }
    Ok(domains)
}

impl EnergySource for PowercapSource {
    fn name(&self) -> &'static str {
        "powercap"
    }

    fn provenance(&self) -> Provenance {
        Provenance::Measured
    }

    fn domains(&self) -> &[DomainSpec] {
        &self.domains
    }

    fn read(&mut self, ctx: &ReadContext<'_>) -> Result<Vec<Reading>, SourceError> {
        // Every value first: a failed read leaves every counter where it was, so the next
        // good read brings this interval's energy for all of them.
        let values = self
            .zones
            .iter_mut()
            .map(Zone::read_value)
            .collect::<Result<Vec<u64>, SourceError>>()?;
        Ok(self
            .zones
            .iter_mut()
            .zip(values)
            .map(|(zone, value)| zone.judge(value, ctx))
            .collect())
    }

    fn describe(&self) -> String {
        format!(
            "RAPL energy counters (µJ) from {} ({} zones)",
            self.root.display(),
            self.zones.len()
        )
    }

    fn summary(&self) -> SourceSummary {
        let mut notes = Vec::new();
        for zone in &self.zones {
            if zone.replaced_count > 0 {
                notes.push(SourceNote::degraded(format!(
                    "powercap: {} was replaced (deleted and recreated) {} time(s) during the run; \
                     cg-trace reopened it each time",
                    zone.energy_path.display(),
                    zone.replaced_count
                )));
            }
            for (_, text) in &zone.first_glitches {
                notes.push(SourceNote::info(format!("powercap: first glitch: {text}")));
            }
        }
        SourceSummary {
            notes,
            ..SourceSummary::default()
        }
    }
}

/// Lists the RAPL zones under `root`.
fn discover(root: &Path) -> Result<Vec<FoundZone>, SourceError> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(SourceError::PowercapMissing {
                root: root.to_path_buf(),
            });
        }
        Err(err) => return Err(unreadable(root, &err)),
    };
    let mut zones = Vec::new();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(dir_name) = file_name.to_str() else {
            continue;
        };
        let (prefix, ids) = match dir_name.split_once(':') {
            Some(split) => split,
            None => continue, // the control type itself (`intel-rapl`), not a zone
        };
        let mmio = match prefix {
            "intel-rapl" => false,
            "intel-rapl-mmio" => true,
            _ => continue,
        };
        let dir = entry.path();
        let path_ids: Vec<u32> = ids
            .split(':')
            .map(|id| id.parse())
            .collect::<Result<_, _>>()
            .map_err(|_| malformed(&dir, "zone directory name is not intel-rapl:N[:M]"))?;
        if path_ids.is_empty() || path_ids.len() > 2 {
            return Err(malformed(
                &dir,
                "zone directory name is not intel-rapl:N[:M]",
            ));
        }
        let name_path = dir.join("name");
        let name = fs::read_to_string(&name_path)
            .map_err(|err| match err.kind() {
                io::ErrorKind::NotFound => malformed(&name_path, "missing"),
                _ => unreadable(&name_path, &err),
            })?
            .trim()
            .to_string();
        if name.is_empty() {
            return Err(malformed(&name_path, "empty zone name"));
        }
        zones.push(FoundZone {
            dir,
            path_ids,
            mmio,
            name,
        });
    }
    if zones.is_empty() {
        return Err(SourceError::PowercapMissing {
            root: root.to_path_buf(),
        });
    }
    // MSR zones first so that an mmio duplicate is the one skipped; then by id.
    zones.sort_by(|a, b| (a.mmio, &a.path_ids).cmp(&(b.mmio, &b.path_ids)));
    Ok(zones)
}

/// The domain a zone measures, with its nesting and CPU coverage.
fn domain_for(
    zone: &FoundZone,
    all: &[FoundZone],
    has_psys: bool,
    host: &HostInfo,
) -> Result<DomainSpec, SourceError> {
    let name_path = zone.dir.join("name");
    let psys_parent = has_psys.then(|| "psys".to_string());
    let spec = |name: String, kind, parent, coverage| DomainSpec {
        name,
        kind,
        parent,
        coverage,
        provenance: Provenance::Measured,
        source: "powercap",
    };
    if zone.path_ids.len() == 1 {
        if zone.name == "psys" {
            return Ok(spec(
                "psys".into(),
                DomainKind::Psys,
                None,
                Coverage::AllCpus,
            ));
        }
        let package = package_number(&zone.name).ok_or_else(|| {
            malformed(
                &name_path,
                &format!(
                    "top-level zone named {:?}, expected package-N or psys",
                    zone.name
                ),
            )
        })?;
        return Ok(spec(
            zone.name.clone(),
            DomainKind::Package,
            psys_parent,
            Coverage::Cpus(host.cpus_of_package(package)),
        ));
    }
    // A sub-zone: find its package among the top-level zones of the same kind (MSR or mmio).
    let parent = all
        .iter()
        .find(|z| z.mmio == zone.mmio && z.path_ids == zone.path_ids[..1])
        .ok_or_else(|| malformed(&zone.dir, "sub-zone without its parent zone"))?;
    let package = package_number(&parent.name).ok_or_else(|| {
        malformed(
            &parent.dir.join("name"),
            &format!("zone {:?} has sub-zones but is not package-N", parent.name),
        )
    })?;
    let coverage = Coverage::Cpus(host.cpus_of_package(package));
    let suffix = package_suffix(&parent.name);
    match zone.name.as_str() {
        "core" => Ok(spec(
            format!("core{suffix}"),
            DomainKind::Core,
            Some(parent.name.clone()),
            coverage,
        )),
        "uncore" => Ok(spec(
            format!("uncore{suffix}"),
            DomainKind::Uncore,
            Some(parent.name.clone()),
            coverage,
        )),
        "dram" => Ok(spec(
            format!("dram{suffix}"),
            DomainKind::Dram,
            psys_parent,
            coverage,
        )),
        other => Err(malformed(
            &name_path,
            &format!("unknown sub-zone {other:?}, expected core, uncore or dram"),
        )),
    }
}

/// `package-3` and `package-3-die-1` -> 3.
fn package_number(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("package-")?;
    rest.split('-').next()?.parse().ok()
}

/// `package-3` -> `-3`, `package-3-die-1` -> `-3-die-1`.
fn package_suffix(name: &str) -> &str {
    name.strip_prefix("package").unwrap_or("")
}

fn read_u64(path: &Path) -> Result<u64, SourceError> {
    let file = fs::File::open(path).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => malformed(path, "missing"),
        _ => unreadable(path, &err),
    })?;
    read_u64_at(&file, path)
}

/// Reads an open attribute from offset 0 into a stack buffer (sysfs hands out the whole value
/// in one read; this runs for every zone at every interval).
fn read_u64_at(file: &fs::File, path: &Path) -> Result<u64, SourceError> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 32];
    let mut len = 0;
    loop {
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len == buf.len() {
                    break;
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(unreadable(path, &err)),
        }
    }
    let text = String::from_utf8_lossy(&buf[..len]);
    text.trim()
        .parse()
        .ok()
        .filter(|_| len < buf.len())
        .ok_or_else(|| {
            malformed(
                path,
                &format!("expected an unsigned integer, found {:?}", text.trim()),
            )
        })
}

fn malformed(path: &Path, reason: &str) -> SourceError {
    SourceError::PowercapMalformed {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

fn unreadable(path: &Path, err: &io::Error) -> SourceError {
    SourceError::PowercapUnreadable {
        path: path.to_path_buf(),
        reason: err.to_string(),
        denied: err.kind() == io::ErrorKind::PermissionDenied,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::sources::Unknown;

    /// Writes a zone directory.
    fn zone(root: &Path, dir: &str, name: &str, energy_uj: u64, max_uj: u64) {
        let d = root.join(dir);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("name"), format!("{name}\n")).unwrap();
        fs::write(d.join("energy_uj"), format!("{energy_uj}\n")).unwrap();
        fs::write(d.join("max_energy_range_uj"), format!("{max_uj}\n")).unwrap();
        fs::write(d.join("enabled"), "1\n").unwrap();
    }

    fn set_energy(root: &Path, dir: &str, energy_uj: u64) {
        fs::write(root.join(dir).join("energy_uj"), format!("{energy_uj}\n")).unwrap();
    }

    fn two_package_host() -> HostInfo {
        HostInfo {
            hostname: "h".into(),
            kernel: "k".into(),
            cpu_model: "m".into(),
            cpu_packages: vec![0, 0, 1, 1],
        }
    }

    fn ctx() -> ReadContext<'static> {
        ReadContext {
            duration_ns: 100_000_000,
            busy_ns_per_cpu: &[],
            wall_start_ns: 0,
            wall_end_ns: 100_000_000,
        }
    }

    #[test]
    fn discovers_nested_domains_with_their_topology() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("intel-rapl")).unwrap(); // control type, not a zone
        zone(root, "intel-rapl:0", "package-0", 1_000, 262_143_328_850);
        zone(root, "intel-rapl:0:0", "core", 500, 262_143_328_850);
        zone(root, "intel-rapl:0:1", "uncore", 100, 262_143_328_850);
        zone(root, "intel-rapl:0:2", "dram", 300, 65_712_999_613);
        zone(root, "intel-rapl:1", "package-1", 1_000, 262_143_328_850);
        zone(root, "intel-rapl:1:0", "dram", 300, 65_712_999_613);
        zone(root, "intel-rapl:2", "psys", 9_000, 262_143_328_850);
        zone(
            root,
            "intel-rapl-mmio:0",
            "package-0",
            1_000,
            262_143_328_850,
        );

        let source = PowercapSource::open(root, &two_package_host()).unwrap();
        let by_name = |n: &str| source.domains().iter().find(|d| d.name == n).unwrap();
        let names: Vec<_> = source.domains().iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "package-0",
                "core-0",
                "uncore-0",
                "dram-0",
                "package-1",
                "dram-1",
                "psys"
            ]
        );
        assert_eq!(by_name("core-0").parent.as_deref(), Some("package-0"));
        assert_eq!(by_name("uncore-0").parent.as_deref(), Some("package-0"));
        assert_eq!(by_name("dram-0").parent.as_deref(), Some("psys"));
        assert_eq!(by_name("package-1").parent.as_deref(), Some("psys"));
        assert_eq!(by_name("psys").parent, None);
        assert_eq!(by_name("dram-1").coverage, Coverage::Cpus(vec![2, 3]));
        assert_eq!(by_name("psys").coverage, Coverage::AllCpus);
        assert_eq!(by_name("dram-0").kind, DomainKind::Dram);
    }

    #[test]
    fn without_psys_packages_and_dram_are_top_level() {
        let dir = tempfile::tempdir().unwrap();
        zone(dir.path(), "intel-rapl:0", "package-0", 0, 1_000_000);
        zone(dir.path(), "intel-rapl:0:0", "dram", 0, 1_000_000);
        let source = PowercapSource::open(dir.path(), &two_package_host()).unwrap();
        assert!(source.domains().iter().all(|d| d.parent.is_none()));
    }

    /// The usual range of a package counter: 262,143 J.
    const RANGE_UJ: u64 = 262_143_328_850;

    fn joules(readings: &[Reading]) -> Vec<f64> {
        readings
            .iter()
            .map(|r| r.joules().unwrap_or_else(|| panic!("{readings:?}")))
            .collect()
    }

    /// A 100 ms interval during which CPUs 0 and 1 (package 0) were busy.
    fn busy_ctx() -> ReadContext<'static> {
        static BUSY: [u64; 4] = [100_000_000, 100_000_000, 0, 0];
        ReadContext {
            busy_ns_per_cpu: &BUSY,
            ..ctx()
        }
    }

    #[test]
    fn reads_joules_and_wraps_at_max_energy_range() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(
            root,
            "intel-rapl:0",
            "package-0",
            RANGE_UJ - 1_000_000,
            RANGE_UJ,
        );
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        set_energy(root, "intel-rapl:0", RANGE_UJ - 500_000);
        assert_eq!(joules(&source.read(&ctx()).unwrap()), vec![0.5]);
        // 0.5 J up to the range, 1 µJ to zero, 0.25 J after: 0.750001 J.
        set_energy(root, "intel-rapl:0", 250_000);
        let j = joules(&source.read(&ctx()).unwrap())[0];
        assert!((j - 0.750_001).abs() < 1e-9, "{j}");
    }

    #[test]
    fn a_step_back_is_unknown_energy_not_a_wraparound() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 100_000_000, RANGE_UJ);
        zone(root, "intel-rapl:0:0", "core", 50_000_000, RANGE_UJ);
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        // The package steps back by 1 J (as a wraparound: 262,142 J, 2.6 MW); the core moves.
        set_energy(root, "intel-rapl:0", 99_000_000);
        set_energy(root, "intel-rapl:0:0", 50_500_000);
        let r = source.read(&busy_ctx()).unwrap();
        assert_eq!(r[0], Reading::unknown(Glitch::StepBack));
        assert_eq!(r[1], Reading::Joules(0.5));
        // The next interval starts from the new reading.
        set_energy(root, "intel-rapl:0", 101_000_000);
        set_energy(root, "intel-rapl:0:0", 51_000_000);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![2.0, 0.5]);
        let notes = source.summary().notes;
        assert!(
            notes
                .iter()
                .any(|n| n.text.contains("stepped back") && n.text.contains("2.6 MW")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_jump_beyond_what_the_zone_can_draw_is_unknown_energy() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 0, RANGE_UJ);
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        // +1000 J in 100 ms: 10 kW.
        set_energy(root, "intel-rapl:0", 1_000_000_000);
        assert_eq!(
            source.read(&busy_ctx()).unwrap(),
            vec![Reading::unknown(Glitch::Jump)]
        );
        set_energy(root, "intel-rapl:0", 1_001_000_000);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![1.0]);
    }

    #[test]
    fn the_hardware_power_limit_bounds_what_is_plausible() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 0, RANGE_UJ);
        // A 15 W part: at most 150 W (10 x its largest limit) is plausible.
        fs::write(
            root.join("intel-rapl:0/constraint_0_max_power_uw"),
            "15000000\n",
        )
        .unwrap();
        fs::write(root.join("intel-rapl:0/constraint_1_max_power_uw"), "0\n").unwrap();
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        set_energy(root, "intel-rapl:0", 10_000_000);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![10.0]);
        // 20 J in 100 ms: 200 W.
        set_energy(root, "intel-rapl:0", 30_000_000);
        assert_eq!(
            source.read(&busy_ctx()).unwrap(),
            vec![Reading::unknown(Glitch::Jump)]
        );
    }

    #[test]
    fn a_counter_that_stops_while_its_cpus_are_busy_is_frozen() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 1_000_000, RANGE_UJ);
        zone(root, "intel-rapl:1", "package-1", 1_000_000, RANGE_UJ);
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        // Package 0's CPUs are busy, package 1's idle; neither counter moves.
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![0.0, 0.0]);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![0.0, 0.0]);
        let r = source.read(&busy_ctx()).unwrap();
        assert_eq!(
            r[0],
            Reading::Unknown(Unknown {
                glitch: Glitch::Frozen,
                earlier_count: 2,
                earlier_ns: 200_000_000,
            })
        );
        // An idle package reading 0 J is fine.
        assert_eq!(r[1], Reading::Joules(0.0));
        assert_eq!(
            source.read(&ctx()).unwrap()[0],
            Reading::unknown(Glitch::Frozen)
        );
        // It moves again: measured again.
        set_energy(root, "intel-rapl:0", 1_300_000);
        assert_eq!(source.read(&busy_ctx()).unwrap()[0], Reading::Joules(0.3));
        assert!(
            source
                .summary()
                .notes
                .iter()
                .any(|n| n.text.contains("stopped at 1000000 µJ")),
            "{:?}",
            source.summary().notes
        );
    }

    #[test]
    fn a_deleted_and_recreated_energy_file_is_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 1_000_000, RANGE_UJ);
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        set_energy(root, "intel-rapl:0", 2_000_000);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![1.0]);
        // The zone goes away and comes back: a new file, which the old descriptor never sees.
        let path = root.join("intel-rapl:0/energy_uj");
        fs::remove_file(&path).unwrap();
        fs::write(&path, "5000000\n").unwrap();
        assert_eq!(
            source.read(&busy_ctx()).unwrap(),
            vec![Reading::unknown(Glitch::Replaced)]
        );
        set_energy(root, "intel-rapl:0", 5_700_000);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![0.7]);
        let notes = source.summary().notes;
        assert!(
            notes
                .iter()
                .any(|n| n.degraded && n.text.contains("replaced") && n.text.contains("1 time")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_deleted_energy_file_not_back_yet_gives_no_figure() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 1_000_000, RANGE_UJ);
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        let path = root.join("intel-rapl:0/energy_uj");
        fs::remove_file(&path).unwrap();
        // The open file still reads its last value: not a clean 0 J. Deleted, not replaced.
        assert_eq!(
            source.read(&busy_ctx()).unwrap(),
            vec![Reading::unknown(Glitch::Deleted)]
        );
        assert_eq!(
            Glitch::Deleted.describe(),
            "the counter's file was deleted (and not recreated then)"
        );
        // Back: a new file, reopened.
        fs::write(&path, "3000000\n").unwrap();
        assert_eq!(
            source.read(&busy_ctx()).unwrap(),
            vec![Reading::unknown(Glitch::Replaced)]
        );
        fs::write(&path, "4000000\n").unwrap();
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![1.0]);
    }

    #[test]
    fn a_replaced_file_whose_old_copy_still_moves_is_found_by_the_periodic_check() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 0, RANGE_UJ);
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        let path = root.join("intel-rapl:0/energy_uj");
        // The open file is renamed away and keeps moving; a new one takes its name.
        let old = root.join("old_energy_uj");
        fs::rename(&path, &old).unwrap();
        fs::write(&path, "9000000\n").unwrap();
        let mut replaced = 0;
        for i in 1..=REOPEN_CHECK_READS as u64 {
            fs::write(&old, format!("{}\n", i * 100_000)).unwrap();
            if source.read(&busy_ctx()).unwrap()[0] == Reading::unknown(Glitch::Replaced) {
                replaced += 1;
            }
        }
        assert_eq!(replaced, 1);
    }

    #[test]
    fn a_failed_read_moves_no_counter_so_the_next_one_brings_the_energy() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 0, RANGE_UJ);
        zone(root, "intel-rapl:0:0", "core", 0, RANGE_UJ);
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        set_energy(root, "intel-rapl:0", 1_000_000);
        fs::write(root.join("intel-rapl:0:0/energy_uj"), "garbage\n").unwrap();
        let err = source.read(&busy_ctx()).unwrap_err();
        assert!(err.to_string().contains("intel-rapl:0:0"), "{err}");
        set_energy(root, "intel-rapl:0", 2_000_000);
        set_energy(root, "intel-rapl:0:0", 1_500_000);
        assert_eq!(joules(&source.read(&busy_ctx()).unwrap()), vec![2.0, 1.5]);
    }

    #[test]
    fn missing_root_says_there_is_no_rapl() {
        let dir = tempfile::tempdir().unwrap();
        let err = PowercapSource::open(&dir.path().join("nope"), &two_package_host()).unwrap_err();
        assert!(matches!(err, SourceError::PowercapMissing { .. }), "{err}");
        let empty = PowercapSource::open(dir.path(), &two_package_host()).unwrap_err();
        assert!(
            matches!(empty, SourceError::PowercapMissing { .. }),
            "{empty}"
        );
    }

    #[test]
    fn missing_energy_file_is_a_malformed_tree() {
        let dir = tempfile::tempdir().unwrap();
        zone(dir.path(), "intel-rapl:0", "package-0", 0, 1_000);
        fs::remove_file(dir.path().join("intel-rapl:0/energy_uj")).unwrap();
        let err = PowercapSource::open(dir.path(), &two_package_host()).unwrap_err();
        assert!(
            matches!(err, SourceError::PowercapMalformed { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("energy_uj"), "{err}");
    }

    #[test]
    fn garbage_counter_and_unknown_names_are_malformed() {
        let dir = tempfile::tempdir().unwrap();
        zone(dir.path(), "intel-rapl:0", "package-0", 0, 1_000);
        fs::write(dir.path().join("intel-rapl:0/energy_uj"), "lots\n").unwrap();
        let err = PowercapSource::open(dir.path(), &two_package_host()).unwrap_err();
        assert!(err.to_string().contains("unsigned integer"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        zone(dir.path(), "intel-rapl:0", "gpu-blob", 0, 1_000);
        let err = PowercapSource::open(dir.path(), &two_package_host()).unwrap_err();
        assert!(err.to_string().contains("package-N or psys"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        zone(dir.path(), "intel-rapl:3:0", "core", 0, 1_000);
        let err = PowercapSource::open(dir.path(), &two_package_host()).unwrap_err();
        assert!(err.to_string().contains("without its parent"), "{err}");
    }

    #[test]
    fn unreadable_energy_file_says_to_run_as_root() {
        let dir = tempfile::tempdir().unwrap();
        zone(dir.path(), "intel-rapl:0", "package-0", 0, 1_000);
        let energy = dir.path().join("intel-rapl:0/energy_uj");
        fs::set_permissions(&energy, fs::Permissions::from_mode(0o000)).unwrap();
        if fs::read(&energy).is_ok() {
            // Running as root: permissions do not stop us, so make the path a directory,
            // which fails to read as a file for everyone.
            fs::remove_file(&energy).unwrap();
            fs::create_dir(&energy).unwrap();
        }
        let err = PowercapSource::open(dir.path(), &two_package_host()).unwrap_err();
        assert!(
            matches!(err, SourceError::PowercapUnreadable { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("root"), "{err}");
    }

    #[test]
    fn domains_are_listed_without_reading_counters() {
        let dir = tempfile::tempdir().unwrap();
        zone(dir.path(), "intel-rapl:0", "package-0", 0, 1_000);
        zone(dir.path(), "intel-rapl:0:0", "core", 0, 1_000);
        fs::remove_file(dir.path().join("intel-rapl:0/energy_uj")).unwrap();
        let domains = discover_domains(dir.path(), &two_package_host()).unwrap();
        let names: Vec<_> = domains.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["package-0", "core-0"]);
    }

    #[test]
    fn package_names_with_dies() {
        assert_eq!(package_number("package-1-die-0"), Some(1));
        assert_eq!(package_suffix("package-1-die-0"), "-1-die-0");
        assert_eq!(package_number("psys"), None);
    }
}
