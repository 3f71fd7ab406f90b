//! Context-switch-heavy workload: two processes bounce one byte over a pair of pipes, both
//! pinned to CPU 0, for `SECS` seconds; prints round trips per second (each round trip is at
//! least two context switches).

use std::time::{Duration, Instant};

fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t with CPU 0 set, for the calling process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let (mut ping, mut pong) = ([0i32; 2], [0i32; 2]);
    // SAFETY: pipe fills the arrays we own.
    unsafe {
        libc::pipe(ping.as_mut_ptr());
        libc::pipe(pong.as_mut_ptr());
    }
    pin_to_cpu0();
    let mut byte = [0u8; 1];
    // SAFETY: plain fork; the child only echoes bytes until the pipe closes.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // Keep only our ends, so that the parent closing its write end means EOF here.
        unsafe {
            libc::close(ping[1]);
            libc::close(pong[0]);
        }
        loop {
            if unsafe { libc::read(ping[0], byte.as_mut_ptr().cast(), 1) } != 1 {
                unsafe { libc::_exit(0) };
            }
            unsafe { libc::write(pong[1], byte.as_ptr().cast(), 1) };
        }
    }
    unsafe {
        libc::close(ping[0]);
        libc::close(pong[1]);
    }
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut trips = 0u64;
    while Instant::now() < until {
        for _ in 0..1000 {
            unsafe {
                libc::write(ping[1], byte.as_ptr().cast(), 1);
                libc::read(pong[0], byte.as_mut_ptr().cast(), 1);
            }
        }
        trips += 1000;
    }
    let elapsed = started.elapsed().as_secs_f64();
    unsafe {
        libc::close(ping[1]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    println!("round_trips_per_s {:.0}", trips as f64 / elapsed);
}
