//! Workload of the per-thread tests: a worker pool whose one thread (`busy`) spins until it
//! has had `SECS` seconds of CPU time (its own clock: however busy the machine is) while
//! `IDLE` threads (`idle-N`) sleep, waking every 100 ms to do a moment's work, and the main
//! thread waits for them all.
//!
//! Usage: `cg-pool SECS IDLE`

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

/// CPU time of the calling thread, seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let idle: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(4);
    let done = Arc::new(AtomicBool::new(false));
    let sleepers: Vec<_> = (0..idle)
        .map(|i| {
            let done = Arc::clone(&done);
            thread::Builder::new()
                .name(format!("idle-{i}"))
                .spawn(move || {
                    let mut x = i as u64;
                    while !done.load(Ordering::Relaxed) {
                        for k in 0..1_000u64 {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(k);
                        }
                        std::hint::black_box(x);
                        thread::sleep(Duration::from_millis(100));
                    }
                })
                .expect("spawning an idle thread")
        })
        .collect();
    let busy = thread::Builder::new()
        .name("busy".into())
        .spawn(move || {
            let mut x = 1u64;
            while thread_cpu_s() < seconds {
                for i in 0..100_000u64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
                }
                std::hint::black_box(x);
            }
        })
        .expect("spawning the busy thread");
    busy.join().expect("the busy thread");
    done.store(true, Ordering::Relaxed);
    for sleeper in sleepers {
        sleeper.join().expect("an idle thread");
    }
}
