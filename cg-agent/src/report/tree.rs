//! The process tree of a report's process list: each process's parent as an index into the
//! same list, one home for the walk the summary's `--group-by tree` and `--repeat`'s process
//! groups both make.

use std::collections::BTreeMap;

use super::ProcessEntry;

/// For each process, the index of its parent in `processes`: `None` for a root target (the
/// traced command or an attached process), for a process whose parent is not in the list,
/// and for one that names itself (a reused pid).
pub fn parents(processes: &[ProcessEntry]) -> Vec<Option<usize>> {
    let by_pid: BTreeMap<u32, usize> = processes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.pid, i))
        .collect();
    processes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if p.root {
                return None;
            }
            p.ppid
                .and_then(|pp| by_pid.get(&pp).copied())
                .filter(|&j| j != i)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, ppid: Option<u32>, root: bool) -> ProcessEntry {
        ProcessEntry {
            pid,
            ppid,
            comm: "p".into(),
            cmdline: Vec::new(),
            root,
            cpu_time_s: 0.0,
            energy_j: 0.0,
            avg_power_w: 0.0,
            share_pct: 0.0,
            domains: Default::default(),
            started_s: 0.0,
            ended_s: None,
            alive_s: 0.0,
            exit_code: None,
            exit_signal: None,
            threads: Vec::new(),
            cgroup: None,
        }
    }

    /// ```text
    ///   1 (root) ── 2 ── 3
    ///   9 (its parent 8 is not in the list)
    ///   7 (names itself)
    /// ```
    #[test]
    fn each_parent_is_an_index_and_roots_and_orphans_have_none() {
        let list = [
            process(3, Some(2), false),
            process(1, Some(0), true),
            process(2, Some(1), false),
            process(9, Some(8), false),
            process(7, Some(7), false),
        ];
        assert_eq!(parents(&list), [Some(2), None, Some(1), None, None]);
    }
}
