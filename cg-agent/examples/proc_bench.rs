//! What cg-trace's `/proc` reads cost, hand-written against the `procfs` crate, on this
//! machine's real processes: the per-interval read of a running task's `schedstat`
//! (`probes::running_since`, also the function profiler's per-thread clock), the reads when a
//! process is first seen or execs (`ProcessTable`: owner, `stat`, `cmdline`, `cgroup`), the
//! liveness check of `stat` at the end of a run, `status`'s uids and `maps` (symbolization).
//! Each pair reads the same files through the production parser (or the same steps the
//! production code takes) and through procfs, alternating A/B rounds; the figure is the median
//! over rounds of this thread's CPU time per call. Both sides' results are compared, so a
//! faster reader that reads something else would show (a process that exits or changes
//! between the two reads also shows: run it again). Then it checks, on generated files,
//! whether procfs reads what the kernel or a hostile process can put there as the
//! hand-written readers do. Run by `cargo xtask bench --proc`; prints figures, asserts
//! nothing.

use std::{
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use cg_agent::{
    cgroup,
    functions::maps::ProcMaps,
    probes::parse_schedstat_runtime_ns,
    session::processes::{parse_cmdline, parse_stat},
};
use procfs::{FromRead, process::Process};

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Every process and every thread of the machine now.
fn census(proc_root: &Path) -> (Vec<u32>, Vec<(u32, u32)>) {
    let mut pids = Vec::new();
    let mut threads = Vec::new();
    for entry in fs::read_dir(proc_root).into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        pids.push(pid);
        let tasks = proc_root.join(pid.to_string()).join("task");
        for task in fs::read_dir(tasks).into_iter().flatten().flatten() {
            if let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            {
                threads.push((pid, tid));
            }
        }
    }
    pids.sort_unstable();
    threads.sort_unstable();
    (pids, threads)
}

/// One reader under test: returns a digest of what it read, to compare the two sides.
type Reader<'a> = Box<dyn Fn() -> u64 + 'a>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs both readers `rounds` times (alternating which goes first); prints ns per call.
fn compare(name: &str, calls: usize, rounds: usize, hand: Reader<'_>, crate_: Reader<'_>) {
    let (mut hand_ns, mut crate_ns) = (Vec::new(), Vec::new());
    let (mut hand_digest, mut crate_digest) = (0, 0);
    for round in 0..rounds {
        let order: [(&Reader<'_>, bool); 2] = if round % 2 == 0 {
            [(&hand, true), (&crate_, false)]
        } else {
            [(&crate_, false), (&hand, true)]
        };
        for (reader, is_hand) in order {
            let started = thread_cpu_ns();
            let digest = reader();
            let per_call = (thread_cpu_ns() - started) as f64 / calls.max(1) as f64;
            if is_hand {
                hand_ns.push(per_call);
                hand_digest = digest;
            } else {
                crate_ns.push(per_call);
                crate_digest = digest;
            }
        }
    }
    let (hand_ns, crate_ns) = (median(hand_ns), median(crate_ns));
    println!(
        "{name:<44} {calls:>6} {hand_ns:>10.0} {crate_ns:>10.0} {:>+8.1}%  {}",
        100.0 * (crate_ns / hand_ns - 1.0),
        if hand_digest == crate_digest {
            "same results".to_string()
        } else {
            format!("RESULTS DIFFER ({hand_digest:#x} vs {crate_digest:#x})")
        }
    );
}

fn mix(digest: u64, value: u64) -> u64 {
    (digest ^ value).wrapping_mul(0x100_0000_01b3)
}

fn text_digest(s: &str) -> u64 {
    s.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |d, b| mix(d, u64::from(b)))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(31);
    let proc_root = PathBuf::from("/proc");
    let (pids, threads) = census(&proc_root);
    let root = proc_root.as_path();
    println!(
        "/proc readers on this machine's {} processes and {} threads; median of {rounds} \
         rounds, CPU time of this thread per call (ns), procfs 0.17 against the hand-written \
         code",
        pids.len(),
        threads.len(),
    );
    println!(
        "{:<44} {:>6} {:>10} {:>10} {:>9}",
        "read", "calls", "hand ns", "procfs ns", "procfs"
    );

    // Per interval: the task each CPU runs, its sum_exec_runtime (probes::running_since).
    compare(
        "schedstat of a running task (per interval)",
        threads.len(),
        rounds,
        Box::new(|| {
            let mut digest = 0;
            for &(tgid, tid) in &threads {
                let path = format!("/proc/{tgid}/task/{tid}/schedstat");
                let ns = fs::read_to_string(path)
                    .ok()
                    .and_then(|t| parse_schedstat_runtime_ns(&t));
                digest = mix(digest, u64::from(ns.is_some()));
            }
            digest
        }),
        Box::new(|| {
            let mut digest = 0;
            for &(tgid, tid) in &threads {
                let ns = Process::new(tgid as i32)
                    .and_then(|p| p.task_from_tid(tid as i32))
                    .and_then(|t| t.schedstat())
                    .map(|s| s.sum_exec_runtime)
                    .ok();
                digest = mix(digest, u64::from(ns.is_some()));
            }
            digest
        }),
    );

    // A process first seen (fork, exec, --all): ProcessTable::refresh_from_proc's reads.
    compare(
        "new process: owner, stat, cmdline",
        pids.len(),
        rounds,
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                let dir = root.join(pid.to_string());
                // Gone since the census: skipped, as procfs's side does.
                let Ok(meta) = fs::metadata(&dir) else {
                    continue;
                };
                let uid = meta.uid();
                let stat = fs::read_to_string(dir.join("stat"))
                    .ok()
                    .and_then(|s| parse_stat(&s));
                let cmdline = fs::read(dir.join("cmdline"))
                    .map(|c| parse_cmdline(&c))
                    .unwrap_or_default();
                digest = mix(digest, u64::from(uid));
                if let Some((comm, ppid)) = stat {
                    digest = mix(digest, text_digest(&comm));
                    digest = mix(digest, u64::from(ppid.unwrap_or(0)));
                }
                digest = mix(
                    digest,
                    cmdline.iter().fold(0, |d, a| mix(d, text_digest(a))),
                );
            }
            digest
        }),
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                let Ok(p) = Process::new_with_root(root.join(pid.to_string())) else {
                    continue;
                };
                digest = mix(digest, u64::from(p.uid().unwrap_or(u32::MAX)));
                if let Ok(stat) = p.stat() {
                    digest = mix(digest, text_digest(&stat.comm));
                    digest = mix(digest, stat.ppid as u64);
                }
                let cmdline: Vec<String> = p
                    .cmdline()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|a| !a.is_empty())
                    .collect();
                digest = mix(
                    digest,
                    cmdline.iter().fold(0, |d, a| mix(d, text_digest(a))),
                );
            }
            digest
        }),
    );

    compare(
        "new process: cgroup",
        pids.len(),
        rounds,
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                if let Ok(info) = cgroup::of_pid(root, pid) {
                    digest = mix(digest, text_digest(&info.path));
                }
            }
            digest
        }),
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                let groups =
                    Process::new_with_root(root.join(pid.to_string())).and_then(|p| p.cgroups());
                if let Ok(groups) = groups {
                    let v2 = groups.0.iter().find(|g| g.hierarchy == 0);
                    let v1 = || {
                        groups.0.iter().find(|g| {
                            g.controllers.iter().any(|c| c == "cpu" || c == "cpuacct")
                                && g.pathname != "/"
                        })
                    };
                    let chosen = match v2 {
                        Some(g) if g.pathname == "/" => v1().or(Some(g)),
                        other => other.or_else(v1),
                    };
                    if let Some(g) = chosen {
                        digest = mix(digest, text_digest(&g.pathname));
                    }
                }
            }
            digest
        }),
    );

    // The end of a run: is each target still the same live process (state, start time).
    compare(
        "still alive: stat state and start time",
        pids.len(),
        rounds,
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                let Ok(stat) = fs::read_to_string(root.join(pid.to_string()).join("stat")) else {
                    continue;
                };
                let Some(fields) = stat.rfind(')').map(|close| &stat[close + 1..]) else {
                    continue;
                };
                let fields: Vec<&str> = fields.split_whitespace().collect();
                let state = fields.first().map_or(0, |s| u64::from(s.as_bytes()[0]));
                let ticks = fields.get(19).and_then(|t| t.parse::<u64>().ok());
                digest = mix(mix(digest, state), ticks.unwrap_or(0));
            }
            digest
        }),
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                let Ok(stat) =
                    Process::new_with_root(root.join(pid.to_string())).and_then(|p| p.stat())
                else {
                    continue;
                };
                digest = mix(mix(digest, stat.state as u64), stat.starttime);
            }
            digest
        }),
    );

    // Symbolization: whose files a process may read (functions::symbolize::ProcessUids).
    compare(
        "status: effective and file-system uid",
        pids.len(),
        rounds,
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                let uids = cg_agent::functions::symbolize::ProcessUids::read(root, pid);
                if let Some(u) = uids {
                    digest = mix(mix(digest, u64::from(u.euid)), u64::from(u.fsuid));
                }
            }
            digest
        }),
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                let status =
                    Process::new_with_root(root.join(pid.to_string())).and_then(|p| p.status());
                if let Ok(s) = status {
                    digest = mix(mix(digest, u64::from(s.euid)), u64::from(s.fuid));
                }
            }
            digest
        }),
    );

    // Symbolization: a process's memory map.
    compare(
        "maps (symbolization)",
        pids.len(),
        rounds.min(11),
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                if let Ok(maps) = ProcMaps::read(root, pid) {
                    for m in &maps.mappings {
                        digest = mix(mix(digest, m.start), m.offset);
                    }
                }
            }
            digest
        }),
        Box::new(|| {
            let mut digest = 0;
            for &pid in &pids {
                let maps =
                    Process::new_with_root(root.join(pid.to_string())).and_then(|p| p.maps());
                if let Ok(maps) = maps {
                    for m in maps.iter() {
                        digest = mix(mix(digest, m.address.0), m.offset);
                    }
                }
            }
            digest
        }),
    );

    println!();
    println!("does procfs read the same as the hand-written readers (generated files)?");
    let dir = std::env::temp_dir().join(format!("cg-trace-proc-bench-{}", std::process::id()));
    let pid_dir = dir.join("42");
    let _ = fs::create_dir_all(&pid_dir);
    // A command line with a non-UTF-8 argument (a Latin-1 file name).
    let _ = fs::write(pid_dir.join("cmdline"), b"prog\0caf\xe9\0");
    // A memory map with one line that does not parse between two that do.
    let _ = fs::write(
        pid_dir.join("maps"),
        "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/a\nnot a mapping\n\
         00652000-00653000 rw-p 00052000 08:02 173521 /usr/bin/a\n",
    );
    let hand_cmdline = fs::read(pid_dir.join("cmdline")).map(|c| parse_cmdline(&c));
    let process = Process::new_with_root(pid_dir.clone());
    println!(
        "  cmdline with a non-UTF-8 argument: hand {:?}; procfs {:?}",
        hand_cmdline.ok(),
        process
            .as_ref()
            .map(|p| p.cmdline().map_err(|e| e.to_string()))
    );
    println!(
        "  maps with one malformed line: hand {} mappings; procfs {:?}",
        ProcMaps::read(&dir, 42).map_or(0, |m| m.mappings.len()),
        process
            .as_ref()
            .map(|p| p.maps().map(|m| m.len()).map_err(|e| e.to_string()))
    );
    // The input the proc_files fuzz target found in the hand-written stat parser.
    let stat = b") (";
    // The panic is the finding: keep its message off the figures.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let parsed = std::panic::catch_unwind(|| procfs::process::Stat::from_read(&stat[..]).is_ok());
    std::panic::set_hook(hook);
    println!(
        "  stat \") (\" (fuzz/regressions/proc_files/stat-close-paren-first): hand {:?}; \
         procfs {}",
        parse_stat(&String::from_utf8_lossy(stat)),
        match parsed {
            Ok(ok) => format!("parsed: {ok}"),
            Err(_) => "panicked".to_string(),
        }
    );
    let _ = fs::remove_dir_all(&dir);
}
