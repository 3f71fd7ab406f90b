//! Workload for the live view's benchmark: `cg-idle N SECS` forks N processes that sleep for
//! SECS seconds, each waking once a second (so that a tracer sees every one of them run), and
//! waits for them. Prints `ready` once all of them exist. A SIGTERM (to it, or to its process
//! group) ends the children, and this parent, which outlives the signal, exits once it has
//! reaped every one: once it is gone, so are they (orphaned, they lingered as zombies until
//! the machine's init reaped them, and the next benchmark round walked a thousand extra tasks).

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
    let mut children = Vec::with_capacity(count);
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
                eprintln!("cg-idle: fork failed after {} children", children.len());
                break;
            }
            pid => children.push(pid),
        }
    }
    // SAFETY: a handler that does nothing (async-signal-safe), set after the forks so that
    // the children keep the default action and die of the signal; without SA_RESTART, so
    // that the signal interrupts `wait`.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_term as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
    println!("ready {}", children.len());
    let _ = std::io::stdout().flush();
    loop {
        // SAFETY: waiting for our own children.
        let reaped = unsafe { libc::wait(std::ptr::null_mut()) };
        if reaped > 0 {
            // Gone: its pid may be another process's from now on.
            if let Some(at) = children.iter().position(|&child| child == reaped) {
                children.swap_remove(at);
            }
            continue;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
        // A SIGTERM interrupted the wait: pass it on (it may have come to this process
        // alone), then reap them all.
        for &child in &children {
            // SAFETY: signalling a child of ours not yet reaped (its pid is still its own).
            unsafe { libc::kill(child, libc::SIGTERM) };
        }
    }
}

extern "C" fn on_term(_: libc::c_int) {}
