//! Facts about the machine the report records and the sources need: host name, kernel, CPU
//! model, which CPUs exist and which package each belongs to. Paths are parameters so tests
//! can point them at generated trees.

use std::{fs, path::Path};

/// Static facts about the host.
#[derive(Clone, Debug, PartialEq)]
pub struct HostInfo {
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    /// Package (socket) id of each possible CPU, indexed by CPU id.
    pub cpu_packages: Vec<u32>,
}

impl HostInfo {
    /// The two-CPU, one-package host the unit tests' runs are made on.
    #[cfg(test)]
    pub(crate) fn two_cpu_test_host() -> Self {
        Self {
            hostname: "test".into(),
            kernel: "6.18".into(),
            cpu_model: "test cpu".into(),
            cpu_packages: vec![0, 0],
        }
    }

    /// Reads the running machine.
    pub fn read() -> Self {
        Self::read_from(Path::new("/proc"), Path::new("/sys/devices/system/cpu"))
    }

    /// Reads from a procfs root and a `/sys/devices/system/cpu` root; anything unreadable is
    /// reported as "unknown" rather than failing the run.
    pub fn read_from(proc_root: &Path, cpu_root: &Path) -> Self {
        let read = |p: &Path| fs::read_to_string(p).map(|s| s.trim().to_string()).ok();
        let hostname =
            read(&proc_root.join("sys/kernel/hostname")).unwrap_or_else(|| "unknown".into());
        let kernel =
            read(&proc_root.join("sys/kernel/osrelease")).unwrap_or_else(|| "unknown".into());
        let cpu_model = read(&proc_root.join("cpuinfo"))
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let cpu_count = read(&cpu_root.join("possible"))
            .and_then(|s| parse_cpu_list(&s))
            .map(|cpus| cpus.iter().max().map_or(1, |m| *m as usize + 1))
            .unwrap_or(1);
        let cpu_packages = (0..cpu_count)
            .map(|cpu| {
                read(&cpu_root.join(format!("cpu{cpu}/topology/physical_package_id")))
                    .and_then(|s| s.parse::<i64>().ok())
                    .map_or(0, |id| id.max(0) as u32)
            })
            .collect();
        HostInfo {
            hostname,
            kernel,
            cpu_model,
            cpu_packages,
        }
    }

    /// Number of possible CPUs (the width of the kernel's per-CPU maps).
    pub fn cpu_count(&self) -> usize {
        self.cpu_packages.len()
    }

    /// CPU ids of package `package`.
    pub fn cpus_of_package(&self, package: u32) -> Vec<u32> {
        self.cpu_packages
            .iter()
            .enumerate()
            .filter(|(_, p)| **p == package)
            .map(|(cpu, _)| cpu as u32)
            .collect()
    }
}

/// The most CPUs a CPU list may name, and the bound on their ids: far above any kernel's
/// `NR_CPUS` (8,192 at most today), low enough that a hostile list cannot make cg-trace
/// allocate gigabytes.
pub const MAX_CPUS: u32 = 65_536;

/// Parses a kernel CPU list such as `0-3,8,10-11`; `None` when malformed or naming more
/// than [`MAX_CPUS`] CPUs or an id beyond it.
pub fn parse_cpu_list(list: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b): (u32, u32) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let cpu = part.trim().parse().ok()?;
                (cpu, cpu)
            }
        };
        if b < a || b >= MAX_CPUS || cpus.len() + (b - a) as usize >= MAX_CPUS as usize {
            return None;
        }
        cpus.extend(a..=b);
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `perf_tree` fuzz target: a PMU `cpumask` of `0-690622951` made cg-trace
    /// allocate 2.7 GB.
    #[test]
    fn cpu_lists_longer_than_any_kernel_allows_are_refused() {
        let tree = include_str!("../../fuzz/regressions/perf_tree/cpumask-690-million-cpus");
        let mask = tree
            .lines()
            .find_map(|l| l.strip_prefix("power/cpumask="))
            .unwrap();
        assert_eq!(parse_cpu_list(mask), None);
        assert_eq!(parse_cpu_list("0-65536"), None);
        assert_eq!(parse_cpu_list("65536"), None);
        assert_eq!(parse_cpu_list("0-40000,0-40000"), None);
        assert_eq!(parse_cpu_list("65535").map(|c| c.len()), Some(1));
        assert_eq!(parse_cpu_list("0-65535").map(|c| c.len()), Some(65_536));
    }

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn reads_a_generated_tree() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        let cpu_root = dir.path().join("cpu");
        fs::create_dir_all(proc_root.join("sys/kernel")).unwrap();
        fs::write(proc_root.join("sys/kernel/hostname"), "box\n").unwrap();
        fs::write(
            proc_root.join("cpuinfo"),
            "processor\t: 0\nmodel name\t: Test CPU @ 1GHz\n",
        )
        .unwrap();
        for (cpu, pkg) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
            let t = cpu_root.join(format!("cpu{cpu}/topology"));
            fs::create_dir_all(&t).unwrap();
            fs::write(t.join("physical_package_id"), format!("{pkg}\n")).unwrap();
        }
        fs::write(cpu_root.join("possible"), "0-3\n").unwrap();
        let host = HostInfo::read_from(&proc_root, &cpu_root);
        assert_eq!(host.hostname, "box");
        assert_eq!(host.kernel, "unknown");
        assert_eq!(host.cpu_model, "Test CPU @ 1GHz");
        assert_eq!(host.cpu_count(), 4);
        assert_eq!(host.cpus_of_package(1), vec![2, 3]);
    }
}
