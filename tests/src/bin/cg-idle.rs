//! Workload for the live view's benchmark: `cg-idle N SECS` forks N processes that sleep for
//! SECS seconds, each waking once a second (so that a tracer sees every one of them run), and
//! waits for them. Prints `ready` once all of them exist.

use std::{
    io::Write,
    time::{Duration, Instant},
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(count), Some(seconds)) = (
        args.first().and_then(|a| a.parse::<usize>().ok()),
        args.get(1).and_then(|a| a.parse::<f64>().ok()),
    ) else {
        eprintln!("usage: cg-idle N SECS");
        std::process::exit(2);
    };
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut children = 0;
    for _ in 0..count {
        // SAFETY: this program is single-threaded; the child only sleeps and exits.
        match unsafe { libc::fork() } {
            0 => {
                while Instant::now() < until {
                    std::thread::sleep(Duration::from_secs(1).min(until - Instant::now()));
                }
                // SAFETY: leaving the child without running the parent's exit handlers.
                unsafe { libc::_exit(0) };
            }
            -1 => {
                eprintln!("cg-idle: fork failed after {children} children");
                break;
            }
            _ => children += 1,
        }
    }
    println!("ready {children}");
    let _ = std::io::stdout().flush();
    // SAFETY: waiting for our own children.
    while unsafe { libc::wait(std::ptr::null_mut()) } > 0 {}
}
