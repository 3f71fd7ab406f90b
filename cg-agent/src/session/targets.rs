//! Checks the pids given to `--pid` before anything is traced: each must be a running
//! process; a thread id stands for its process (said on stderr); kernel threads are refused
//! (they have no process of their own to follow: `--all` sees them); pid 1 is traced with a
//! warning (every process it starts from then on is followed too).

use std::path::Path;

/// The kernel's flag for a kernel thread (`PF_KTHREAD`, field 9 of `/proc/PID/stat`).
const PF_KTHREAD: u64 = 0x0020_0000;

/// The processes to trace for `pids` (in order, without repeats), and warnings to print;
/// `Err` with what to do when a pid cannot be traced.
pub fn check(proc_root: &Path, pids: &[u32]) -> Result<(Vec<u32>, Vec<String>), String> {
    let mut out: Vec<u32> = Vec::new();
    let mut warnings = Vec::new();
    for &pid in pids {
        let dir = proc_root.join(pid.to_string());
        let status = std::fs::read_to_string(dir.join("status")).map_err(|_| {
            format!("no process with pid {pid} (it may have exited); check with `ps -p {pid}`")
        })?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u32>().ok())
        };
        let Some(tgid) = field("Tgid:") else {
            return Err(format!(
                "pid {pid}: {} has no Tgid line; is {} a proc file system?",
                dir.join("status").display(),
                proc_root.display()
            ));
        };
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        if flags(&stat).is_some_and(|f| f & PF_KTHREAD != 0) {
            return Err(format!(
                "pid {pid} ({}) is a kernel thread: it has no process of its own to follow; \
                 `cg-trace --all` accounts the whole machine, kernel threads included",
                comm(&stat).unwrap_or("?")
            ));
        }
        let pid = if tgid != pid {
            warnings.push(format!(
                "pid {pid} is a thread of process {tgid}: tracing process {tgid} (all its \
                 threads)"
            ));
            tgid
        } else {
            pid
        };
        if pid == 1 {
            warnings.push(
                "warning: pid 1 is init: every process it starts from now on is followed \
                 too"
                .to_string(),
            );
        }
        if !out.contains(&pid) {
            out.push(pid);
        }
    }
    Ok((out, warnings))
}

/// The command name in `/proc/PID/stat` (inside the parentheses).
fn comm(stat: &str) -> Option<&str> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    stat.get(open + 1..close)
}

/// Field 9 (flags) of `/proc/PID/stat`; the command name before it may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn flags(stat: &str) -> Option<u64> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    // state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8) flags(9)
    rest.split_whitespace().nth(6)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(root: &Path, pid: u32, tgid: u32, comm: &str, flags: u64) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("status"),
            format!("Name:\t{comm}\nTgid:\t{tgid}\nPid:\t{pid}\n"),
        )
        .unwrap();
        std::fs::write(
            dir.join("stat"),
            format!("{pid} ({comm}) S 1 {tgid} {tgid} 0 -1 {flags} 0 0 0 0\n"),
        )
        .unwrap();
    }

    #[test]
    fn a_thread_id_stands_for_its_process_and_says_so() {
        let root = tempfile::tempdir().unwrap();
        process(root.path(), 500, 500, "server", 0x0040_0100);
        process(root.path(), 503, 500, "worker) x (y", 0x0040_0040);
        let (pids, warnings) = check(root.path(), &[503, 500]).unwrap();
        assert_eq!(pids, [500]);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("thread of process 500"),
            "{warnings:?}"
        );
    }

    #[test]
    fn kernel_threads_are_refused_with_a_pointer_to_all() {
        let root = tempfile::tempdir().unwrap();
        process(root.path(), 2, 2, "kthreadd", 2_129_984);
        let err = check(root.path(), &[2]).unwrap_err();
        assert!(
            err.contains("kernel thread") && err.contains("--all") && err.contains("kthreadd"),
            "{err}"
        );
    }

    #[test]
    fn pid_1_is_traced_with_a_warning_and_a_missing_pid_is_refused() {
        let root = tempfile::tempdir().unwrap();
        process(root.path(), 1, 1, "init", 0x0040_0100);
        let (pids, warnings) = check(root.path(), &[1]).unwrap();
        assert_eq!(pids, [1]);
        assert!(warnings[0].contains("init"), "{warnings:?}");
        let err = check(root.path(), &[77]).unwrap_err();
        assert!(err.contains("no process with pid 77"), "{err}");
    }
}
