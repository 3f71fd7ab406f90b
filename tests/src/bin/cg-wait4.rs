//! Runs a command as a child, waits for it with `wait4` and appends `PID CPU_SECONDS` to a
//! log: the kernel's own figure of the CPU time of the child and its waited-for descendants
//! at exit (the scheduler's exact runtime, in microseconds). Exits with the child's status.
//!
//! `cg-wait4 LOG CMD [ARGS...]` (e.g. as `make CC="cg-wait4 log gcc"`).

use std::{ffi::CString, io::Write};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (log, command) = match args.split_first() {
        Some((log, command)) if !command.is_empty() => (log.clone(), command.to_vec()),
        _ => {
            eprintln!("usage: cg-wait4 LOG CMD [ARGS...]");
            std::process::exit(2);
        }
    };
    let argv: Vec<CString> = command
        .iter()
        .map(|a| CString::new(a.as_str()).expect("no NUL in arguments"))
        .collect();
    let mut pointers: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: the child only execs (or exits); the parent waits for it.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a null-terminated argv of C strings that outlive the call.
        unsafe {
            libc::execvp(pointers[0], pointers.as_ptr());
            libc::_exit(127);
        }
    }
    let mut status = 0;
    // SAFETY: wait4 writes the status and usage we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let cpu_s = usage.ru_utime.tv_sec as f64
        + usage.ru_utime.tv_usec as f64 / 1e6
        + usage.ru_stime.tv_sec as f64
        + usage.ru_stime.tv_usec as f64 / 1e6;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .expect("opening the log");
    // One write per line: several cg-wait4 (make -j) append to the same log at once.
    file.write_all(format!("{pid} {cpu_s:.6}\n").as_bytes())
        .expect("writing the log");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    std::process::exit(code);
}
