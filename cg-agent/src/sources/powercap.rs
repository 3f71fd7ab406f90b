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
    path::{Path, PathBuf},
};

use super::{
    DomainKind, DomainSpec, EnergySource, Provenance, ReadContext, SourceError,
    counter::WrappingCounter,
};
use crate::{attribution::Coverage, host::HostInfo};

/// Where the kernel exposes powercap zones.
pub const DEFAULT_ROOT: &str = "/sys/class/powercap";

/// One readable zone. Its `energy_uj` stays open: reading a sysfs attribute again from offset
/// 0 yields a fresh value, at one syscall per zone and interval instead of three.
#[derive(Debug)]
struct Zone {
    energy_path: PathBuf,
    energy_file: fs::File,
    counter: WrappingCounter,
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
            let energy_path = zone.dir.join("energy_uj");
            let energy_file = fs::File::open(&energy_path).map_err(|err| match err.kind() {
                io::ErrorKind::NotFound => malformed(&energy_path, "missing"),
                _ => unreadable(&energy_path, &err),
            })?;
            let mut counter = WrappingCounter::new(max);
            counter.advance(read_u64_at(&energy_file, &energy_path)?);
            zones.push(Zone {
                energy_path,
                energy_file,
                counter,
            });
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

    fn read(&mut self, _ctx: &ReadContext<'_>) -> Result<Vec<f64>, SourceError> {
        self.zones
            .iter_mut()
            .map(|zone| {
                let value = read_u64_at(&zone.energy_file, &zone.energy_path)?;
                Ok(zone.counter.advance(value) as f64 / 1e6)
            })
            .collect()
    }

    fn describe(&self) -> String {
        format!(
            "RAPL energy counters (µJ) from {} ({} zones)",
            self.root.display(),
            self.zones.len()
        )
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

    #[test]
    fn reads_joules_and_wraps_at_max_energy_range() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        zone(root, "intel-rapl:0", "package-0", 9_000_000, 10_000_000);
        let mut source = PowercapSource::open(root, &two_package_host()).unwrap();
        set_energy(root, "intel-rapl:0", 9_500_000);
        assert_eq!(source.read(&ctx()).unwrap(), vec![0.5]);
        // 9.5 J -> wrap at 10 J -> 0.25 J: 0.75 J (+1 µJ for the step to zero).
        set_energy(root, "intel-rapl:0", 250_000);
        let j = source.read(&ctx()).unwrap()[0];
        assert!((j - 0.750_001).abs() < 1e-9, "{j}");
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
