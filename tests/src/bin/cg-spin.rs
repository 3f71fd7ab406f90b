//! Workload for benchmarks and attach tests: spins on the CPU for `SECS` seconds of wall
//! time (forever with 0), optionally forking a spinning child after `--fork-after SECS`,
//! and prints how many work units per second it completed.

use std::time::{Duration, Instant};

fn spin_for(seconds: f64) -> u64 {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut units = 0u64;
    let mut x = 1u64;
    while seconds == 0.0 || Instant::now() < until {
        for i in 0..100_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        units += 1;
    }
    units
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let fork_after: Option<f64> = args
        .iter()
        .position(|a| a == "--fork-after")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok());
    let started = Instant::now();
    let mut units = 0;
    if let Some(after) = fork_after {
        units += spin_for(after);
        // SAFETY: the child only spins and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            spin_for((seconds - after).max(0.1));
            unsafe { libc::_exit(0) };
        }
        units += spin_for((seconds - after).max(0.1));
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    } else {
        units += spin_for(seconds);
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!("units_per_s {:.1}", units as f64 / elapsed);
}
