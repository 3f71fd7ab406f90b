//! Workload with a known CPU split: burns `--before MS` of its own CPU time, forks one child
//! per `--children MS[,MS...]` entry, each burning that many milliseconds of its own CPU
//! time, waits for them, burns `--self MS` itself, and exits with `--exit CODE`. Prints each
//! child's pid and measured CPU time. All amounts are CPU time, not wall time, so they hold
//! on a loaded machine.

use std::time::Duration;

fn cpu_time_of_self() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Spins until this process has used `ms` more milliseconds of CPU.
fn burn(ms: u64) {
    let until = cpu_time_of_self() + Duration::from_millis(ms);
    let mut x = 0u64;
    while cpu_time_of_self() < until {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let children: Vec<u64> = value("--children")
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    let own: u64 = value("--self").and_then(|v| v.parse().ok()).unwrap_or(0);
    let before: u64 = value("--before").and_then(|v| v.parse().ok()).unwrap_or(0);
    let code: i32 = value("--exit").and_then(|v| v.parse().ok()).unwrap_or(0);
    let sequential = args.iter().any(|a| a == "--sequential");

    burn(before);
    // The kernel's own figure of a child's CPU time once it is reaped (wait4's rusage).
    let reap = |pid: libc::pid_t| -> f64 {
        let mut status = 0;
        // SAFETY: wait4 writes the status and usage we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        usage.ru_utime.tv_sec as f64
            + usage.ru_utime.tv_usec as f64 / 1e6
            + usage.ru_stime.tv_sec as f64
            + usage.ru_stime.tv_usec as f64 / 1e6
    };
    let mut pids = Vec::new();
    let mut used = Vec::new();
    for ms in children {
        // SAFETY: the child only burns CPU and exits; no locks are held across fork.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            burn(ms);
            unsafe { libc::_exit(0) };
        }
        if sequential {
            used.push((pid, ms, reap(pid)));
        } else {
            pids.push((pid, ms));
        }
    }
    for (pid, ms) in pids {
        used.push((pid, ms, reap(pid)));
    }
    for (pid, ms, cpu) in used {
        println!("child {pid} asked {ms} ms used {cpu:.6} s");
    }
    burn(own);
    std::process::exit(code);
}
