//! The kernel's eBPF features, asked once at start-up where a stop signal cannot spoil them.
//!
//! aya asks the kernel what it supports once per process, by loading tiny programs it does
//! not retry, and keeps the answers for the life of the process. A stop signal (SIGSTOP,
//! which no thread can hold back) while it asks makes the verifier answer EAGAIN, which aya
//! reads as a missing feature; the load of our programs then fails on what it decided (seen:
//! "error relocating `func_entry`: section `24` not found" for the globals, in about one of six
//! runs of the start-up test's sixteen stop/continue storms).
//!
//! So the question is asked first thing, while the process has one thread, with every other
//! signal held. A stop cannot end without a continue (SIGCONT), which then waits, held: a
//! continue waiting means the answers may be the signal's, and the program starts again from
//! its own image (`execve`), where aya asks afresh. (Keeping answers with every feature on,
//! which a signal cannot have spoiled, would save the restart, but a 6.18 kernel already
//! answers one of aya's questions, zero-sized BTF data sections, with no.)

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt as _;

use super::retry::HeldSignals;

/// Counts the restarts across `execve` (removed from the environment as soon as read, so the
/// traced command never sees it).
const RESTARTS_VAR: &str = "CG_TRACE_FEATURE_RESTARTS";

/// Restarts at most this many times in a row; past this the run goes on with what aya has (a
/// load that then fails says so). The probes take a few milliseconds: a 1 s storm of stops
/// and continues every 1-3 ms from the start cost 0 to 1 restarts (measured, debug build).
const MAX_RESTARTS: u32 = 100;

/// Asks aya for the kernel's features now; starts the program again (does not return) when a
/// stop may have spoiled the answer. Call it first, before the process has a child or a file
/// of its own: a restart starts all of that again.
///
/// # Safety
///
/// The process must have one thread: this changes the environment, and a held continue
/// is seen only while no other thread can take it.
pub unsafe fn settle() {
    // SAFETY (every env call below): the process has one thread (the caller's promise).
    let restarts = restarts_so_far();
    unsafe { std::env::remove_var(RESTARTS_VAR) };
    let continued = {
        let _held = HeldSignals::hold();
        let _ = aya::features();
        take_pending_continue()
    };
    tracing::debug!(continued, restarts, features = ?aya::features(), "the kernel's eBPF features asked");
    if !continued {
        return;
    }
    if restarts >= MAX_RESTARTS {
        tracing::warn!(
            "stop signals kept coming while the kernel's eBPF features were asked \
             ({restarts} restarts): going on with what was found"
        );
        return;
    }
    unsafe { std::env::set_var(RESTARTS_VAR, (restarts + 1).to_string()) };
    let err = restart();
    unsafe { std::env::remove_var(RESTARTS_VAR) };
    tracing::warn!(
        "could not start again after a stop signal came while the kernel's eBPF features \
         were asked (a load may fail on a feature read as missing): {err}"
    );
}

/// The restarts counted so far (0 in a fresh start, or a value not written by [`settle`]).
fn restarts_so_far() -> u32 {
    std::env::var(RESTARTS_VAR)
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

/// Takes a SIGCONT waiting for this thread or the process (held back by the caller), and says
/// whether there was one. Every other waiting signal stays waiting.
fn take_pending_continue() -> bool {
    take_pending(libc::SIGCONT)
}

/// Takes `signal` if it waits for this thread or the process (held back by the caller);
/// says whether it did. Never blocks.
fn take_pending(signal: libc::c_int) -> bool {
    // SAFETY: the set is ours and initialised before use; a zero timeout never blocks.
    unsafe {
        let mut only: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, signal);
        let now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::sigtimedwait(&only, std::ptr::null_mut(), &now) == signal
    }
}

/// Runs this program's own image again with the same arguments and environment; returns only
/// on failure. Signals are no longer held here (the caller's hold has ended): one that came
/// meanwhile has been delivered as it would have been a moment earlier.
fn restart() -> std::io::Error {
    let argv: Vec<CString> = match std::env::args_os().map(c_string).collect() {
        Some(argv) => argv,
        None => return std::io::Error::other("an argument holds a NUL byte"),
    };
    let mut pointers: Vec<*const libc::c_char> = argv.iter().map(|arg| arg.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: the path and every argument are NUL-terminated and outlive the call; the array
    // ends with a null pointer; `execv` passes the current environment on.
    unsafe { libc::execv(c"/proc/self/exe".as_ptr(), pointers.as_ptr()) };
    std::io::Error::last_os_error()
}

fn c_string(arg: OsString) -> Option<CString> {
    CString::new(arg.into_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SIGCONT raised while held is found and taken; another signal waiting is left alone;
    /// nothing waiting reads as no continue.
    #[test]
    fn a_continue_waiting_is_found_and_taken_and_others_are_left() {
        // Runs on its own thread: the signals are sent to it alone and stay held there.
        std::thread::spawn(|| {
            let _held = HeldSignals::hold();
            assert!(!take_pending_continue(), "nothing sent yet");
            // SAFETY: signals to this thread, held back by `_held`.
            unsafe {
                libc::pthread_kill(libc::pthread_self(), libc::SIGCONT);
                libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2);
            }
            assert!(take_pending_continue());
            assert!(!take_pending_continue(), "taken the first time");
            // SIGUSR2 still waits: take it, so releasing the hold does not end the test.
            assert!(take_pending(libc::SIGUSR2));
        })
        .join()
        .unwrap();
    }
}
